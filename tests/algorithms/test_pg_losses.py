"""GPG, DRO and the REINFORCE form: plain policy-gradient losses on log π_θ, by hand."""

import math

import pytest
import torch

from hybridrl.algorithms import ActorLossSettings, PolicyLossSettings
from hybridrl.algorithms.pg_losses import (
    compute_policy_loss_dro,
    compute_policy_loss_gpg,
    compute_policy_loss_reinforce,
)

LOG_PROB = torch.tensor([[math.log(0.5), math.log(0.25), 0.0]])
ADVANTAGES = torch.tensor([[2.0, -1.0, 5.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0]])


def test_gpg_is_minus_log_prob_times_advantage_with_no_metrics():
    # (-2 ln 0.5 + ln 0.25) / 2 = (1.386294 - 1.386294) / 2 = 0; seq-mean-token-sum: the row sum, 0
    log_prob = LOG_PROB.clone().requires_grad_(True)
    loss, metrics = compute_policy_loss_gpg(torch.zeros(1, 3), log_prob, ADVANTAGES, MASK, "token-mean")
    torch.testing.assert_close(loss, torch.tensor(0.0))
    assert metrics == {}
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[-1.0, 0.5, 0.0]]))


def test_dro_adds_a_quadratic_log_ratio_penalty():
    # old = log_prob - (0.1, -0.2): loss = mean(-(logp·A - β/2·Δ²)) with β = 2: Δ² = (0.01, 0.04)
    old = LOG_PROB - torch.tensor([[0.1, -0.2, 0.0]])
    settings = ActorLossSettings(policy_loss=PolicyLossSettings(dro_beta=2.0))
    loss, metrics = compute_policy_loss_dro(old, LOG_PROB, ADVANTAGES, MASK, "token-mean", settings)
    expected = (-(2 * math.log(0.5) - 0.01) - (-math.log(0.25) - 0.04)) / 2
    torch.testing.assert_close(loss, torch.tensor(expected))
    torch.testing.assert_close(metrics["actor/ppo_kl"], torch.tensor(0.05))  # mean(-(0.1, -0.2))
    with pytest.raises(ValueError, match="dro_beta=None must be a positive number"):
        compute_policy_loss_dro(old, LOG_PROB, ADVANTAGES, MASK, "token-mean", ActorLossSettings())


def test_reinforce_weights_log_prob_by_the_is_weights():
    weights = torch.tensor([[2.0, 0.5, 1.0]])
    rollout = LOG_PROB - 0.3
    loss, metrics = compute_policy_loss_reinforce(rollout, LOG_PROB, ADVANTAGES, MASK, "token-mean",
                                                  rollout_is_weights=weights)
    torch.testing.assert_close(loss, torch.tensor((-2 * 2 * math.log(0.5) + 0.5 * math.log(0.25)) / 2))
    torch.testing.assert_close(metrics["actor/ppo_kl"], torch.tensor(-0.3))  # E[log π_rollout − log π_θ]
