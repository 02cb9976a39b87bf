"""loss_mode=bypass_mode: PPO-clip on π_θ/π_rollout over the rejection-filtered mask, or REINFORCE with the
truncated IS weights; rollout_corr/* metrics alongside."""

import math

import pytest
import torch

from hybridrl.algorithms import ActorLossSettings, PolicyLossSettings, RolloutCorrectionSettings
from hybridrl.algorithms.bypass_loss import compute_policy_loss_bypass_mode
from hybridrl.algorithms.ppo_losses import compute_policy_loss_vanilla

ROLLOUT = torch.zeros(1, 3)  # old_log_prob in bypass mode is π_rollout's
LOG_PROB = torch.tensor([[math.log(3.0), math.log(0.9), math.log(1.1)]])  # ρ = (3, 0.9, 1.1)
ADVANTAGES = torch.tensor([[1.0, -1.0, 2.0]])
MASK = torch.ones(1, 3)


def _settings(**correction):
    return ActorLossSettings(clip_ratio=0.2, policy_loss=PolicyLossSettings(
        rollout_correction=RolloutCorrectionSettings(bypass_mode=True, **correction)))


def test_ppo_clip_uses_the_filtered_mask_and_no_weights():
    # token_k1 band [1/2, 2] drops the first token (ρ = 3); PPO on the other two equals vanilla on that mask
    settings = _settings(loss_type="ppo_clip", rollout_is="token", rollout_rs="token_k1", rollout_rs_threshold=2.0)
    loss, metrics = compute_policy_loss_bypass_mode(ROLLOUT, LOG_PROB, ADVANTAGES, MASK, "token-mean", settings)
    expected, _ = compute_policy_loss_vanilla(ROLLOUT, LOG_PROB, ADVANTAGES, torch.tensor([[0.0, 1.0, 1.0]]),
                                              "token-mean", settings)
    torch.testing.assert_close(loss, expected)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 / 3)
    assert "actor/pg_clipfrac" in metrics and "rollout_corr/kl" in metrics


def test_reinforce_weights_log_prob_by_truncated_ratios():
    # TIS at 2: w = (2, 0.9, 1.1), detached; loss = mean(−A·w·log π_θ)
    settings = _settings(loss_type="reinforce", rollout_is="token", rollout_is_threshold=2.0)
    log_prob = LOG_PROB.clone().requires_grad_(True)
    loss, metrics = compute_policy_loss_bypass_mode(ROLLOUT, log_prob, ADVANTAGES, MASK, "token-mean", settings)
    expected = (-2 * math.log(3.0) + 0.9 * math.log(0.9) - 2 * 1.1 * math.log(1.1)) / 3
    torch.testing.assert_close(loss, torch.tensor(expected))
    loss.backward()  # the weights carry no gradient: d/dlogp = −A·w / 3
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-2.0, 0.9, -2.2]]) / 3)
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(2.0)


def test_bypass_needs_its_settings_and_a_known_loss_type():
    with pytest.raises(ValueError, match="needs the rollout correction settings"):
        compute_policy_loss_bypass_mode(ROLLOUT, LOG_PROB, ADVANTAGES, MASK, "token-mean", ActorLossSettings())
    with pytest.raises(ValueError, match="loss_type='pg'"):
        compute_policy_loss_bypass_mode(ROLLOUT, LOG_PROB, ADVANTAGES, MASK, "token-mean", _settings(loss_type="pg"))
