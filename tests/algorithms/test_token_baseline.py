"""The optimal token baseline (OTB) and its multi-turn form: hand-derived values.

w_t = 1 − 2π_t + Σπ², so (π, Σπ²) = (0.5, 0.5) gives w = 0.5 and (0.25, 0.5) or (0.5, 1.0) give w = 1.
"""

import math

import pytest
import torch

from hybridrl.algorithms import (
    compute_advantage,
    compute_multi_turn_optimal_token_baseline_advantage,
    compute_optimal_token_baseline_advantage,
    logprobs_from_logits,
    sum_pi_squared_from_logits,
)


def _log(probabilities):
    return torch.tensor(probabilities).log()


# row 0: two tokens, reward 1 at the end, w = (0.5, 1.0) -> W = (0.5, 1.5), G = (1, 1)
# row 1: one token, reward 3, w = 1.0 -> W = (1.0, 0), G = (3, 0)
REWARDS = torch.tensor([[0.0, 1.0], [3.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
OLD_LOG_PROBS = _log([[0.5, 0.5], [0.25, 0.5]])
SUM_PI_SQUARED = torch.tensor([[0.5, 1.0], [0.5, 0.5]])


def test_otb_baseline_by_hand():
    # B_0 = (1·0.5 + 3·1.0) / 1.5 = 7/3; B_1 = (1·1.5) / 1.5 = 1.
    # handle_zero_tail: row 0 alone is longest (2 > 1), so its B from column 1 on is 0.
    advantages, returns = compute_optimal_token_baseline_advantage(REWARDS, MASK, ["g", "g"], OLD_LOG_PROBS,
                                                                   SUM_PI_SQUARED)
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.0], [3.0, 0.0]]))
    torch.testing.assert_close(advantages, torch.tensor([[1 - 7 / 3, 1.0], [3 - 7 / 3, 0.0]]))
    without_tail, _ = compute_optimal_token_baseline_advantage(REWARDS, MASK, ["g", "g"], OLD_LOG_PROBS,
                                                               SUM_PI_SQUARED, handle_zero_tail=False)
    torch.testing.assert_close(without_tail, torch.tensor([[1 - 7 / 3, 0.0], [3 - 7 / 3, 0.0]]))


def test_otb_scales_the_variance_proxy_by_squared_is_weights_and_skips_groups_of_one():
    # ρ̄ = 2 on row 1: its w becomes 4, B_0 = (0.5 + 3·4) / 4.5 = 25/9
    weights = torch.tensor([[1.0, 1.0], [2.0, 1.0]])
    advantages, _ = compute_optimal_token_baseline_advantage(REWARDS, MASK, ["g", "g"], OLD_LOG_PROBS,
                                                             SUM_PI_SQUARED, rollout_is_weights=weights)
    torch.testing.assert_close(advantages[:, 0], torch.tensor([1 - 25 / 9, 3 - 25 / 9]))
    alone, returns = compute_optimal_token_baseline_advantage(REWARDS, MASK, ["a", "b"], OLD_LOG_PROBS, SUM_PI_SQUARED)
    torch.testing.assert_close(alone, returns * MASK)  # rollout.n = 1: advantage = reward-to-go


def test_multi_turn_otb_compares_the_t_th_generated_tokens():
    # row 0: mask (1, 0, 1), an observation in the middle (its w = 100 is masked out), reward 1 at t=2:
    #   G = (1, 1, 1), valid W = (0.5, ·, 1.5) -> compacted G (1, 1), W (0.5, 1.5)
    # row 1: mask (1, 1, 0), reward 3 at t=1: compacted G (3, 3), W (1, 2)
    # B = ((0.5 + 3) / 1.5, (1.5 + 6) / 3.5) = (7/3, 15/7); equal lengths: no zero tail
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 3.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    old_log_probs = _log([[0.5, 0.5, 0.25], [0.25, 0.5, 0.5]])
    sum_pi_squared = torch.tensor([[0.5, 100.0, 0.5], [0.5, 1.0, 0.5]])
    advantages, returns = compute_multi_turn_optimal_token_baseline_advantage(
        rewards, mask, ["g", "g"], old_log_probs, sum_pi_squared)
    torch.testing.assert_close(advantages, torch.tensor([[1 - 7 / 3, 0.0, 1 - 15 / 7], [3 - 7 / 3, 3 - 15 / 7, 0.0]]))
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.0, 1.0], [3.0, 3.0, 0.0]]))
    # the absolute-position OTB lines up t=2 of row 0 with row 1's padding instead
    absolute, _ = compute_optimal_token_baseline_advantage(rewards, mask, ["g", "g"], old_log_probs, sum_pi_squared,
                                                           handle_zero_tail=False)
    assert not torch.allclose(absolute, advantages)


def test_multi_turn_otb_ignores_rows_without_tokens():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    log_probs = _log([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])
    sum_sq = torch.full((3, 2), 0.5)
    advantages, _ = compute_multi_turn_optimal_token_baseline_advantage(rewards, mask, ["g", "g", "g"], log_probs,
                                                                        sum_sq)
    # rows 0 and 2 share W = 0.5: B = 1.5; the empty row stays out of the group and gets 0
    torch.testing.assert_close(advantages, torch.tensor([[-0.5, 0.0], [0.0, 0.0], [0.5, 0.0]]))


def test_dispatcher_asks_for_the_actor_statistics():
    options = dict(token_level_rewards=REWARDS, response_mask=MASK, index=["g", "g"])
    for name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        with pytest.raises(ValueError, match="calculate_sum_pi_squared=true"):
            compute_advantage(name, **options, old_log_probs=OLD_LOG_PROBS)
    advantages, _ = compute_advantage("optimal_token_baseline", **options, old_log_probs=OLD_LOG_PROBS,
                                      sum_pi_squared=SUM_PI_SQUARED)
    assert math.isclose(advantages[0, 0].item(), 1 - 7 / 3, rel_tol=1e-6)


@pytest.mark.parametrize("name", ["optimal_token_baseline", "tir_optimal_token_baseline"])
def test_registry_runs_otb_on_the_statistics_of_logits(name):
    """π and Σπ² taken from logits as the actor's forward takes them: logits (0, ln 3) give p = (1/4, 3/4) and
    Σπ² = 1/16 + 9/16 = 5/8. Row 0 sampled token 1 (π = 3/4, w = 1 − 3/2 + 5/8 = 1/8, reward 1), row 1 token 0
    (π = 1/4, w = 1 − 1/2 + 5/8 = 9/8, reward 0): B = (1 · 1/8) / (1/8 + 9/8) = 1/10. IS weights (1, 2) scale
    row 1's w by 4: B = (1/8) / (1/8 + 9/2) = 1/37."""
    logits = torch.tensor([[[0.0, math.log(3)]], [[0.0, math.log(3)]]])  # (B=2, T=1, V=2)
    labels = torch.tensor([[1], [0]])
    old_log_probs = logprobs_from_logits(logits, labels)
    sum_pi_squared = sum_pi_squared_from_logits(logits)
    torch.testing.assert_close(sum_pi_squared, torch.full((2, 1), 0.625))
    options = dict(token_level_rewards=torch.tensor([[1.0], [0.0]]), response_mask=torch.ones(2, 1),
                   index=["g", "g"], old_log_probs=old_log_probs, sum_pi_squared=sum_pi_squared)
    advantages, _ = compute_advantage(name, **options)
    torch.testing.assert_close(advantages, torch.tensor([[0.9], [-0.1]]))
    weighted, _ = compute_advantage(name, **options, rollout_is_weights=torch.tensor([[1.0], [2.0]]))
    torch.testing.assert_close(weighted, torch.tensor([[36 / 37], [-1 / 37]]))
