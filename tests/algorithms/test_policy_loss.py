"""The policy-loss table and verl's registry API: names, one signature for all, user registration."""

import pytest
import torch

from hybridrl.algorithms import (
    POLICY_LOSSES,
    ActorLossSettings,
    PolicyLossSettings,
    RolloutCorrectionSettings,
    agg_loss,
    get_policy_loss_fn,
    register_policy_loss,
)
from hybridrl.algorithms.policy_loss import policy_agg_mode

VERL_LOSSES = {  # registered by verl at its January and August 2026 trees (core_algos.py)
    "vanilla", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "cispo", "bypass_mode",  # both
    "dppo_tv", "dppo_kl", "dro",  # August only
}
SETTINGS = ActorLossSettings(policy_loss=PolicyLossSettings(
    dro_beta=0.1, rollout_correction=RolloutCorrectionSettings(rollout_is="token")))


def _batch():
    generator = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 6, generator=generator) - 0.1
    log_prob = (old + 0.1 * torch.randn(4, 6, generator=generator)).clamp(max=-0.01).requires_grad_(True)
    advantages = torch.randn(4, 6, generator=generator)
    mask = torch.ones(4, 6)
    mask[1, 4:] = 0
    return old, log_prob, advantages, mask


def test_every_verl_loss_is_registered():
    assert VERL_LOSSES <= set(POLICY_LOSSES)


@pytest.mark.parametrize("name", sorted(VERL_LOSSES))
def test_every_loss_takes_verls_signature_and_gives_a_finite_gradient(name):
    old, log_prob, advantages, mask = _batch()
    loss, metrics = get_policy_loss_fn(name)(old, log_prob, advantages, mask, "token-mean", SETTINGS, None)
    loss.backward()
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert torch.isfinite(log_prob.grad).all() and log_prob.grad[1, 4:].abs().sum() == 0  # padding gets none
    assert all(key.startswith(("actor/", "rollout_corr/")) for key in metrics)


def test_fixed_aggregations_follow_verl():
    assert policy_agg_mode("vanilla", "token-mean") == "token-mean"
    assert policy_agg_mode("gspo", "token-mean") == policy_agg_mode("sapo", "token-sum") == "seq-mean-token-mean"
    with pytest.raises(ValueError, match="loss_mode='nope' is not supported"):
        get_policy_loss_fn("nope")


def test_a_loss_written_for_verl_registers_and_reads_its_config():
    @register_policy_loss("test_scaled_pg", agg_mode="seq-mean-token-sum")
    def scaled_pg(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
                  rollout_is_weights=None):
        scale = config.get("clip_ratio_c", 3.0) * config.policy_loss.ppo_kl_coef
        pg_losses = -advantages * log_prob * scale
        loss = agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode="seq-mean-token-sum",
                        **config.global_batch_info)
        return loss, {"actor/scale": torch.tensor(scale)}

    try:
        log_prob = torch.tensor([[-1.0, -2.0]])
        settings = ActorLossSettings(clip_ratio_c=4.0, policy_loss=PolicyLossSettings(ppo_kl_coef=0.5))
        loss, metrics = get_policy_loss_fn("test_scaled_pg")(log_prob, log_prob, torch.ones(1, 2), torch.ones(1, 2),
                                                             "token-mean", settings)
        torch.testing.assert_close(loss, torch.tensor(6.0))  # −(−1 −2)·(4·0.5), summed over the row
        assert metrics["actor/scale"].item() == 2.0
        assert policy_agg_mode("test_scaled_pg", "token-mean") == "seq-mean-token-sum"
        with pytest.raises(ValueError, match="already registered"):
            register_policy_loss("vanilla")(scaled_pg)
        with pytest.raises(ValueError, match="agg_mode='mean'"):
            register_policy_loss("test_other", agg_mode="mean")
    finally:
        POLICY_LOSSES.pop("test_scaled_pg", None)


def test_settings_read_like_verl_configs():
    settings = ActorLossSettings(clip_ratio=0.3, clip_ratio_high=0.28, loss_scale_factor=512)
    assert settings.clip_range() == (0.3, 0.28)
    assert settings.get("clip_ratio_c") == 3.0 and settings.get("missing", 7) == 7 and settings["tau_neg"] == 1.05
    assert settings.global_batch_info == {"loss_scale_factor": 512}
    with pytest.raises(KeyError):
        settings["missing"]
