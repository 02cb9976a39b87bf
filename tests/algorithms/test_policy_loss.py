"""PPO dual-clip and GSPO losses: hand-derived values, clip fractions, gradients, registry."""

import math

import pytest
import torch

from hybridrl.algorithms import POLICY_LOSSES, compute_policy_loss, compute_policy_loss_gspo, get_policy_loss_fn


def dual_clip_case():
    # old log-prob 0, so ratio r = exp(logp). eps = 0.2, c = 3. Tokens:
    # 1: A=+1, r=1.5 -> L1=-1.5, L2=-1.2, max=-1.2 (clipped)
    # 2: A=-1, r=0.5 -> L1=0.5, L2=0.8, max=0.8 (clipped); dual clip min(3, 0.8) = 0.8
    # 3: A=-1, r=5   -> L1=5, L2=1.2, max=5; dual clip min(3, 5) = 3 (lower-clipped)
    # 4: A=+1, r=1   -> -1 (unclipped)
    # 5: masked garbage (A=100, logp=30 is clamped to 20 before exp)
    ratios = torch.tensor([[1.5, 0.5, 5.0, 1.0, 1.0]])
    log_prob = ratios.log()
    log_prob[0, 4] = 30.0
    log_prob.requires_grad_(True)
    advantages = torch.tensor([[1.0, -1.0, -1.0, 1.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    return torch.zeros_like(ratios), log_prob, advantages, mask


def test_dual_clip_values_and_clip_fractions_by_hand():
    old, log_prob, advantages, mask = dual_clip_case()
    pg_loss, clipfrac, ppo_kl, clipfrac_lower = compute_policy_loss(old, log_prob, advantages, mask, cliprange=0.2)
    # token-mean: (-1.2 + 0.8 + 3 - 1) / 4 = 0.4; clipfrac 2/4 (tokens 1, 2); lower 1/4 (token 3)
    torch.testing.assert_close(pg_loss, torch.tensor(0.4))
    torch.testing.assert_close(clipfrac, torch.tensor(0.5))
    torch.testing.assert_close(clipfrac_lower, torch.tensor(0.25))
    # ppo_kl = mean(-log r) = -(ln 1.5 + ln 0.5 + ln 5 + 0) / 4 = -1.321756 / 4
    torch.testing.assert_close(ppo_kl, torch.tensor(-(math.log(1.5) + math.log(0.5) + math.log(5.0)) / 4))
    # gradients: clipped and dual-clipped tokens are constant; token 4: d(-A r)/dlogp = -r = -1, / 4 tokens
    pg_loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[0.0, 0.0, 0.0, -0.25, 0.0]]))


def test_asymmetric_clip_and_fallback_to_cliprange():
    old, log_prob, advantages, mask = dual_clip_case()
    # clip_high 0.6: token 1 (r=1.5 < 1.6) is no longer clipped -> loss (-1.5 + 0.8 + 3 - 1) / 4 = 0.325
    loss_high, clipfrac, _, _ = compute_policy_loss(old, log_prob, advantages, mask, cliprange=0.2, cliprange_high=0.6)
    torch.testing.assert_close(loss_high, torch.tensor(0.325))
    torch.testing.assert_close(clipfrac, torch.tensor(0.25))
    explicit = compute_policy_loss(old, log_prob, advantages, mask, cliprange_low=0.2, cliprange_high=0.2)
    fallback = compute_policy_loss(old, log_prob, advantages, mask, cliprange=0.2)
    for a, b in zip(explicit, fallback):
        torch.testing.assert_close(a, b)


def test_clip_ratio_c_must_exceed_one():
    old, log_prob, advantages, mask = dual_clip_case()
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1.0"):
        compute_policy_loss(old, log_prob, advantages, mask, cliprange=0.2, clip_ratio_c=1.0)
    with pytest.raises(ValueError, match="needs cliprange"):
        compute_policy_loss(old, log_prob, advantages, mask)


def test_rollout_is_weights_scale_token_losses():
    old, log_prob, advantages, mask = dual_clip_case()
    weights = torch.tensor([[2.0, 1.0, 0.5, 0.0, 1.0]])
    loss, *_ = compute_policy_loss(old, log_prob, advantages, mask, cliprange=0.2, rollout_is_weights=weights)
    # (-1.2*2 + 0.8*1 + 3*0.5 + -1*0) / 4 = (-2.4 + 0.8 + 1.5) / 4 = -0.025
    torch.testing.assert_close(loss, torch.tensor(-0.025))


def test_gspo_sequence_ratio_by_hand():
    # one sequence, log-ratios (0.1, 0.3) + a masked token: log s = 0.2, s = e^0.2 = 1.221403
    # A = 1, clip 0.2: L1 = -1.221403, L2 = -1.2 -> clipped, loss -1.2, clipfrac 1, ppo_kl = -0.2
    old = torch.zeros(1, 3)
    log_prob = torch.tensor([[0.1, 0.3, 9.0]], requires_grad=True)
    advantages, mask = torch.ones(1, 3), torch.tensor([[1.0, 1.0, 0.0]])
    pg_loss, clipfrac, ppo_kl, lower = compute_policy_loss_gspo(old, log_prob, advantages, mask, 0.2, 0.2)
    torch.testing.assert_close(pg_loss, torch.tensor(-1.2))
    torch.testing.assert_close(clipfrac, torch.tensor(1.0))
    torch.testing.assert_close(ppo_kl, torch.tensor(-0.2))
    assert lower.item() == 0.0
    # clip_high 0.3 (1.3 > 1.221403): unclipped; each token's ratio has value s and d/dlogp_t = s,
    # so d loss / d logp_t = -A * s / 2 tokens (seq-mean-token-mean) = -0.610701
    pg_loss, clipfrac, _, _ = compute_policy_loss_gspo(old, log_prob, advantages, mask, 0.2, 0.3)
    torch.testing.assert_close(pg_loss, torch.tensor(-math.exp(0.2)))
    pg_loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-math.exp(0.2) / 2, -math.exp(0.2) / 2, 0.0]]))


def test_registry_uniform_signature():
    old, log_prob, advantages, mask = dual_clip_case()
    options = dict(clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0, loss_agg_mode="token-mean")
    loss, metrics = POLICY_LOSSES["vanilla"](old, log_prob, advantages, mask, **options)
    torch.testing.assert_close(loss, torch.tensor(0.4))
    assert set(metrics) == {"pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"}
    # gspo ignores loss_agg_mode (verl always uses seq-mean-token-mean for it)
    gspo_token_mean, _ = get_policy_loss_fn("gspo")(old, log_prob, advantages, mask, **options)
    gspo_direct, *_ = compute_policy_loss_gspo(old, log_prob, advantages, mask, 0.2, 0.2)
    torch.testing.assert_close(gspo_token_mean, gspo_direct)
    with pytest.raises(ValueError, match="gspo"):
        get_policy_loss_fn("sapo")


def test_loss_scale_factor_divides_seq_mean_token_sum_norm():
    """Dr.GRPO's constant normaliser: Σ token losses / loss_scale_factor (default: the padded length, 5 here).
    Token losses of the dual-clip case: -1.2 + 0.8 + 3 - 1 = 1.6."""
    old, log_prob, advantages, mask = dual_clip_case()
    options = dict(clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0, loss_agg_mode="seq-mean-token-sum-norm")
    default, _ = POLICY_LOSSES["vanilla"](old, log_prob, advantages, mask, **options)
    scaled, _ = POLICY_LOSSES["vanilla"](old, log_prob, advantages, mask, loss_scale_factor=2.0, **options)
    torch.testing.assert_close(default, torch.tensor(1.6 / 5))
    torch.testing.assert_close(scaled, torch.tensor(1.6 / 2))
