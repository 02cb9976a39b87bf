"""Ratio-clipped losses (vanilla PPO dual-clip, GSPO, SAPO, CISPO, GMPO): hand-derived values, clip fractions,
gradients."""

import math

import pytest
import torch

from hybridrl.algorithms import ActorLossSettings, compute_policy_loss, compute_policy_loss_gspo
from hybridrl.algorithms.ppo_losses import (
    compute_policy_loss_cispo,
    compute_policy_loss_geo_mean,
    compute_policy_loss_sapo,
    compute_policy_loss_vanilla,
)


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
    pg_loss, metrics = compute_policy_loss_gspo(old, log_prob, advantages, mask, config=ActorLossSettings(0.2))
    torch.testing.assert_close(pg_loss, torch.tensor(-1.2))
    torch.testing.assert_close(metrics["actor/pg_clipfrac"], torch.tensor(1.0))
    torch.testing.assert_close(metrics["actor/ppo_kl"], torch.tensor(-0.2))
    assert metrics["actor/pg_clipfrac_lower"].item() == 0.0
    # clip_high 0.3 (1.3 > 1.221403): unclipped; each token's ratio has value s and d/dlogp_t = s,
    # so d loss / d logp_t = -A * s / 2 tokens (seq-mean-token-mean) = -0.610701
    wider = ActorLossSettings(clip_ratio=0.2, clip_ratio_high=0.3)
    pg_loss, _ = compute_policy_loss_gspo(old, log_prob, advantages, mask, "token-mean", wider)
    torch.testing.assert_close(pg_loss, torch.tensor(-math.exp(0.2)))
    pg_loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-math.exp(0.2) / 2, -math.exp(0.2) / 2, 0.0]]))


def test_vanilla_reads_verl_settings_and_returns_verl_metric_names():
    old, log_prob, advantages, mask = dual_clip_case()
    loss, metrics = compute_policy_loss_vanilla(old, log_prob, advantages, mask, "token-mean",
                                                ActorLossSettings(clip_ratio=0.2, clip_ratio_c=3.0))
    torch.testing.assert_close(loss, torch.tensor(0.4))
    assert set(metrics) == {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}
    # clip_ratio_low/high fall back to clip_ratio; clip_ratio_high=0.6 unclips token 1 (see above): 0.325
    loss_high, _ = compute_policy_loss_vanilla(old, log_prob, advantages, mask, "token-mean",
                                               ActorLossSettings(clip_ratio=0.2, clip_ratio_high=0.6))
    torch.testing.assert_close(loss_high, torch.tensor(0.325))


def test_loss_scale_factor_divides_seq_mean_token_sum_norm():
    """Dr.GRPO (verl HEAD): the mean over sequences of token sums / loss_scale_factor (default: the padded
    length, 5 here). One sequence, token losses -1.2 + 0.8 + 3 - 1 = 1.6."""
    old, log_prob, advantages, mask = dual_clip_case()
    default, _ = compute_policy_loss_vanilla(old, log_prob, advantages, mask, "seq-mean-token-sum-norm",
                                             ActorLossSettings())
    scaled, _ = compute_policy_loss_vanilla(old, log_prob, advantages, mask, "seq-mean-token-sum-norm",
                                            ActorLossSettings(loss_scale_factor=2.0))
    torch.testing.assert_close(default, torch.tensor(1.6 / 5))
    torch.testing.assert_close(scaled, torch.tensor(1.6 / 2))


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_sapo_gates_by_hand_and_matches_ppo_gradient_on_policy():
    # r = 1.5, A = +1, tau_pos = 1:     gate = σ(0.5)·4 = 2.489836, loss -2.489836
    # r = 0.5, A = -1, tau_neg = 1.05:  gate = σ(-0.525)·4/1.05, loss +gate
    # one sequence of 2 valid tokens (+1 masked): seq-mean-token-mean whatever loss_agg_mode says
    log_prob = torch.tensor([[math.log(1.5), math.log(0.5), 3.0]], requires_grad=True)
    advantages, mask = torch.tensor([[1.0, -1.0, 7.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    loss, metrics = compute_policy_loss_sapo(torch.zeros(1, 3), log_prob, advantages, mask, "token-sum",
                                             ActorLossSettings(tau_pos=1.0, tau_neg=1.05))
    expected = (-sigmoid(0.5) * 4 + sigmoid(-0.525) * 4 / 1.05) / 2
    torch.testing.assert_close(loss, torch.tensor(expected))
    assert metrics["actor/pg_clipfrac"].item() == 0.0 and metrics["actor/pg_clipfrac_lower"].item() == 0.0
    # at r = 1 the gate's slope is 4·σ'(0) = 1, so the gradient is PPO's: -A / tokens
    on_policy = torch.zeros(1, 2, requires_grad=True)
    loss, _ = compute_policy_loss_sapo(torch.zeros(1, 2), on_policy, torch.tensor([[1.0, -2.0]]), torch.ones(1, 2),
                                       config=ActorLossSettings(tau_pos=3.0, tau_neg=5.0))
    loss.backward()
    torch.testing.assert_close(on_policy.grad, torch.tensor([[-0.5, 1.0]]))


def test_cispo_clips_the_weight_but_keeps_every_gradient():
    # r = (1.5, 0.5, 1.1), A = (1, -1, 1), ε = 0.2: sg(clip r) = (1.2, 0.8, 1.1)
    # loss = mean(-w·A·logp) = (-1.2 ln 1.5 + 0.8 ln 0.5 - 1.1 ln 1.1) / 3; clipfrac 2/3
    log_prob = torch.tensor([[math.log(1.5), math.log(0.5), math.log(1.1)]], requires_grad=True)
    advantages, mask = torch.tensor([[1.0, -1.0, 1.0]]), torch.ones(1, 3)
    loss, metrics = compute_policy_loss_cispo(torch.zeros(1, 3), log_prob, advantages, mask, "token-mean",
                                              ActorLossSettings(clip_ratio=0.2))
    expected = (-1.2 * math.log(1.5) + 0.8 * math.log(0.5) - 1.1 * math.log(1.1)) / 3
    torch.testing.assert_close(loss, torch.tensor(expected))
    torch.testing.assert_close(metrics["actor/pg_clipfrac"], torch.tensor(2 / 3))
    loss.backward()  # d/dlogp = -w·A / 3: the clipped tokens still learn (PPO would give them 0)
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-1.2, 0.8, -1.1]]) / 3)


def test_geo_mean_clips_token_log_ratios_then_takes_the_geometric_mean():
    # row 0, A = +1, δ = (0.3, -0.1, 0.5), ε = 0.2: clip -> (0.2, -0.1, 0.2); A > 0 keeps the smaller:
    #   (0.2, -0.1, 0.2), r = exp(0.3/3) = e^0.1, loss = -e^0.1
    # row 1, A = -1, δ = (0.3, -0.5, masked): clip -> (0.2, -0.2); A < 0 keeps the larger: (0.3, -0.2),
    #   r = exp(0.1/2) = e^0.05, loss = +e^0.05.   pg_loss = mean over rows.
    # clipped tokens: row 0 tokens 0, 2 (A > 0), row 1 tokens 0, 1 (A < 0), of 5 valid: 2/5 and 2/5
    log_prob = torch.tensor([[0.3, -0.1, 0.5], [0.3, -0.5, 4.0]])
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    loss, metrics = compute_policy_loss_geo_mean(torch.zeros(2, 3), log_prob, advantages, mask,
                                                 config=ActorLossSettings(clip_ratio=0.2))
    torch.testing.assert_close(loss, torch.tensor((-math.exp(0.1) + math.exp(0.05)) / 2))
    torch.testing.assert_close(metrics["actor/pg_clipfrac"], torch.tensor(0.4))
    torch.testing.assert_close(metrics["actor/pg_clipfrac_lower"], torch.tensor(0.4))
    # IS weights enter as each row's geometric mean: row 0 weights (4, 1, 1/4) -> 1, row 1 (4, 4) -> 4
    weights = torch.tensor([[4.0, 1.0, 0.25], [4.0, 4.0, 9.0]])
    weighted, _ = compute_policy_loss_geo_mean(torch.zeros(2, 3), log_prob, advantages, mask,
                                               config=ActorLossSettings(clip_ratio=0.2), rollout_is_weights=weights)
    torch.testing.assert_close(weighted, torch.tensor((-math.exp(0.1) + 4 * math.exp(0.05)) / 2), rtol=1e-5, atol=1e-6)
