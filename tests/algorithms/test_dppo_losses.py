"""DPPO-Binary-TV and -KL: the trust-region masks and the truncated REINFORCE form, by hand."""

import math

import torch

from hybridrl.algorithms import ActorLossSettings
from hybridrl.algorithms.dppo_losses import compute_policy_loss_dppo_kl, compute_policy_loss_dppo_tv

# q = π_old, p = π_θ of the sampled token; δ = 0.2, C = clip_ratio_c = 2
OLD = [0.5, 0.5, 0.5, 0.5, 0.1]
NEW = [0.8, 0.6, 0.2, 0.4, 0.25]
ADVANTAGES = torch.tensor([[1.0, 1.0, -1.0, -1.0, 1.0]])
SETTINGS = ActorLossSettings(clip_ratio=0.2, clip_ratio_c=2.0)


def _log_probs():
    return torch.tensor([OLD]).log(), torch.tensor([NEW]).log().requires_grad_(True)


def test_dppo_tv_drops_tokens_whose_probability_moved_more_than_delta():
    # p − q = (0.3, 0.1, −0.3, −0.1, 0.15): token 0 (A > 0, > 0.2) and token 2 (A < 0, < −0.2) are dropped.
    # kept: −A·min(r, 2)·log p: token 1: −1.2 ln 0.6; token 3: +0.8 ln 0.4; token 4: r = 2.5 -> 2: −2 ln 0.25
    old, new = _log_probs()
    loss, metrics = compute_policy_loss_dppo_tv(old, new, ADVANTAGES, torch.ones(1, 5), "token-mean", SETTINGS)
    expected = (-1.2 * math.log(0.6) + 0.8 * math.log(0.4) - 2.0 * math.log(0.25)) / 5
    torch.testing.assert_close(loss, torch.tensor(expected))
    torch.testing.assert_close(metrics["actor/pg_clipfrac"], torch.tensor(2 / 5))
    torch.testing.assert_close(metrics["actor/pg_clipfrac_lower"], torch.tensor(1 / 5))  # token 4 truncated
    loss.backward()  # the truncated ratio is a constant: d/dlogp = −A·min(r, C) / 5 on kept tokens
    torch.testing.assert_close(new.grad, torch.tensor([[0.0, -1.2, 0.0, 0.8, -2.0]]) / 5)


def binary_kl(q, p):
    return q * math.log(q / p) + (1 - q) * math.log((1 - q + 1e-8) / (1 - p + 1e-8))


def test_dppo_kl_drops_tokens_past_the_binary_kl_in_the_advantage_direction():
    kls = [binary_kl(q, p) for q, p in zip(OLD, NEW)]
    # token 0: A > 0, p > q, KL(0.5‖0.8) = 0.2231 > 0.2 -> dropped; token 1: KL 0.0204 kept;
    # token 2: A < 0, p < q, KL(0.5‖0.2) = 0.2231 -> dropped; token 3 kept; token 4: KL 0.0253 kept
    assert kls[0] > 0.2 and kls[2] > 0.2 and max(kls[1], kls[3], kls[4]) < 0.2
    old, new = _log_probs()
    loss, metrics = compute_policy_loss_dppo_kl(old, new, ADVANTAGES, torch.ones(1, 5), "token-mean", SETTINGS)
    expected = (-1.2 * math.log(0.6) + 0.8 * math.log(0.4) - 2.0 * math.log(0.25)) / 5
    torch.testing.assert_close(loss, torch.tensor(expected))
    torch.testing.assert_close(metrics["actor/pg_clipfrac"], torch.tensor(2 / 5))


def test_dppo_kl_keeps_a_token_that_moved_against_the_advantage():
    # A > 0 but p fell (0.5 -> 0.1): far outside δ in KL, yet kept (the update reverses, it does not overshoot)
    old, new = torch.tensor([[0.5]]).log(), torch.tensor([[0.1]]).log()
    _, metrics = compute_policy_loss_dppo_kl(old, new, torch.ones(1, 1), torch.ones(1, 1), "token-mean", SETTINGS)
    assert metrics["actor/pg_clipfrac"].item() == 0.0
