"""Clip-Cov and KL-Cov: which tokens the covariance picks, and the resulting losses, by hand.

A = (3, 1, −1, −3) (mean 0), log p = (−0.5, −1, −1.5, −1) (mean −1): Cov = A·(log p + 1) = (1.5, 0, 0.5, 0).
"""

import math

import torch

from hybridrl.algorithms import ActorLossSettings, PolicyLossSettings
from hybridrl.algorithms.cov_losses import compute_policy_loss_clip_cov, compute_policy_loss_kl_cov

ADVANTAGES = torch.tensor([[3.0, 1.0, -1.0, -3.0, 8.0]])
LOG_PROB = torch.tensor([[-0.5, -1.0, -1.5, -1.0, -9.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])  # the last token is padding


def test_clip_cov_cuts_the_gradient_of_tokens_inside_the_covariance_window():
    # window (1, 5): only token 0 (Cov 1.5); max(1, ⌊0.0002·4⌋) = 1 token cut.
    # r = 1 everywhere: token losses −A = (−3, −1, 1, 3) × keep (0, 1, 1, 1) -> mean 3/4; clipfrac 1/4
    log_prob = LOG_PROB.clone().requires_grad_(True)
    loss, metrics = compute_policy_loss_clip_cov(LOG_PROB, log_prob, ADVANTAGES, MASK, "token-mean",
                                                 ActorLossSettings(clip_ratio=0.2))
    torch.testing.assert_close(loss, torch.tensor(0.75))
    torch.testing.assert_close(metrics["actor/pg_clipfrac"], torch.tensor(0.25))
    assert "actor/pg_clipfrac_lower" not in metrics  # as verl
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[0.0, -1.0, 1.0, 3.0, 0.0]]) / 4)


def test_clip_cov_draws_its_share_at_random_among_candidates():
    # window (0.1, 5) holds tokens 0 and 2; clip_cov_ratio 0.3: ⌊0.3·4⌋ = 1 of the 2 is cut
    settings = ActorLossSettings(clip_ratio=0.2, policy_loss=PolicyLossSettings(clip_cov_ratio=0.3, clip_cov_lb=0.1))
    cut = set()
    for seed in range(8):
        torch.manual_seed(seed)
        _, metrics = compute_policy_loss_clip_cov(LOG_PROB, LOG_PROB, ADVANTAGES, MASK, "token-mean", settings)
        torch.testing.assert_close(metrics["actor/pg_clipfrac"], torch.tensor(0.25))
        torch.manual_seed(seed)
        loss, _ = compute_policy_loss_clip_cov(LOG_PROB, LOG_PROB, ADVANTAGES, MASK, "token-mean", settings)
        cut.add(round(loss.item(), 6))  # cutting token 0 gives 3/4, cutting token 2 gives -1/4
    assert cut == {0.75, -0.25}


def test_kl_cov_adds_the_penalty_to_the_highest_covariance_tokens():
    # old = log p − 0.1: r = e^0.1, |Δ| = 0.1. kl_cov_ratio 0.5 -> ⌊0.5·4⌋ = 2 tokens: 0 and 2 (Cov 1.5, 0.5),
    # each + ppo_kl_coef·0.1 = 0.01. Σ −A·r = 0, so the mean is 0.02 / 4; actor/ppo_kl = mean |Δ| = 0.1
    settings = ActorLossSettings(policy_loss=PolicyLossSettings(kl_cov_ratio=0.5, ppo_kl_coef=0.1))
    log_prob = LOG_PROB.clone().requires_grad_(True)
    loss, metrics = compute_policy_loss_kl_cov(LOG_PROB - 0.1, log_prob, ADVANTAGES, MASK, "token-mean", settings)
    torch.testing.assert_close(loss, torch.tensor(0.005), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(metrics["actor/ppo_kl"], torch.tensor(0.1))
    loss.backward()  # d/dlogp: −A·r, + 0.1·sign(Δ) = +0.1 on the penalised tokens; / 4 tokens
    ratio = math.exp(0.1)
    expected = torch.tensor([[-3 * ratio + 0.1, -ratio, ratio + 0.1, 3 * ratio, 0.0]]) / 4
    torch.testing.assert_close(log_prob.grad, expected)
