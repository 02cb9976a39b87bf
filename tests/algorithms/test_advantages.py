"""Advantage estimators: hand-derived values and verl's plain-loop code as the reference."""

from collections import defaultdict

import numpy as np
import pytest
import torch

from hybridrl.algorithms import (
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    compute_rloo_vectorized_outcome_advantage,
    masked_whiten,
)


# ---- references: verl's loop code (core_algos.py), written with Python loops over rows and time ----

def reference_group_advantage(scores, index, kind, epsilon=1e-6, norm_by_std=True):
    id2score = defaultdict(list)
    for i in range(len(scores)):
        id2score[index[i]].append(scores[i])
    out = scores.clone()
    for i in range(len(scores)):
        group = torch.stack(id2score[index[i]])
        n = len(group)
        mean = torch.mean(group) if n > 1 else torch.tensor(0.0)
        std = torch.std(group) if n > 1 else torch.tensor(1.0)
        if kind == "grpo":
            out[i] = (scores[i] - mean) / (std + epsilon) if norm_by_std else scores[i] - mean
        elif kind == "rloo" and n > 1:
            out[i] = scores[i] * n / (n - 1) - mean * n / (n - 1)
        elif kind == "rf++baseline":
            out[i] = scores[i] - mean
    return out


def reference_gae(rewards, values, mask, gamma, lam):
    batch, length = rewards.shape
    advantages = torch.zeros_like(rewards)
    for b in range(batch):
        next_value, last_gae = 0.0, 0.0
        for t in reversed(range(length)):
            delta = rewards[b, t] + gamma * next_value - values[b, t]
            gae_t = delta + gamma * lam * last_gae
            if mask[b, t]:
                next_value, last_gae = values[b, t], gae_t
            advantages[b, t] = last_gae
    return masked_whiten(advantages, mask), advantages + values


def random_batch(seed=0, batch=12, length=6):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).float()  # masked tails
    rewards = torch.randn(batch, length, generator=generator) * mask
    # groups of sizes 4, 3, 2, 1, 1, 1 (size-1 groups included), interleaved
    uids = np.array(["a", "b", "a", "c", "a", "b", "d", "c", "e", "a", "b", "f"], dtype=object)
    return rewards, mask, uids


# ---- hand-derived values ----

def test_grpo_two_groups_by_hand():
    # group "p": scores 1, 0, 1 -> mean 2/3; unbiased var = (1/9 + 4/9 + 1/9) / 2 = 1/3, std = 0.577350
    #   advantages (1/3)/0.577350 = 0.577350, (-2/3)/0.577350 = -1.154701
    # group "q": scores 2, 4 -> mean 3; std = sqrt((1 + 1) / 1) = 1.414214 -> advantages -0.707107, +0.707107
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 4.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.float32)
    index = np.array(["p", "p", "p", "q", "q"], dtype=object)
    advantages, returns = compute_grpo_outcome_advantage(rewards, mask, index)
    expected_per_row = torch.tensor([0.577350, -1.154701, 0.577350, -0.707107, 0.707107])
    torch.testing.assert_close(advantages, expected_per_row[:, None] * mask, rtol=1e-5, atol=1e-5)
    assert torch.equal(advantages, returns)
    # Dr.GRPO (no std): 1/3, -2/3, 1/3, -1, 1
    dr_grpo, _ = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(dr_grpo[:, 0], torch.tensor([1 / 3, -2 / 3, 1 / 3, -1.0, 1.0]))


def test_gae_three_tokens_by_hand():
    # gamma 0.9, lam 0.8, rewards (0, 0, 1), values (0.5, 0.6, 0.7):
    # t=2: delta = 1 - 0.7 = 0.3;                A2 = 0.3
    # t=1: delta = 0.9*0.7 - 0.6 = 0.03;         A1 = 0.03 + 0.72*0.3 = 0.246
    # t=0: delta = 0.9*0.6 - 0.5 = 0.04;         A0 = 0.04 + 0.72*0.246 = 0.21712
    # returns = A + V = (0.71712, 0.846, 1.0)
    # whiten: mean 0.254373, unbiased std 0.042070 -> (-0.88549, -0.19904, 1.08455)
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    advantages, returns = compute_gae_advantage_return(rewards, values, torch.ones(1, 3), gamma=0.9, lam=0.8)
    torch.testing.assert_close(returns, torch.tensor([[0.71712, 0.846, 1.0]]))
    torch.testing.assert_close(advantages, torch.tensor([[-0.88549, -0.19904, 1.08455]]), rtol=1e-4, atol=1e-4)


def test_gae_skips_masked_observation_tokens():
    # mask (1, 0, 1), gamma = lam = 1, rewards (0, 5, 1), values (0.2, 9, 0.4): the masked middle token neither
    # bootstraps a value nor carries its TD error. t=2: A2 = 1 - 0.4 = 0.6; t=1 (masked): A stays 0.6, V_next 0.4;
    # t=0: delta = 0 + 0.4 - 0.2 = 0.2, A0 = 0.2 + 0.6 = 0.8. Raw A = (0.8, 0.6, 0.6); returns = A + V.
    rewards, values = torch.tensor([[0.0, 5.0, 1.0]]), torch.tensor([[0.2, 9.0, 0.4]])
    _, returns = compute_gae_advantage_return(rewards, values, torch.tensor([[1.0, 0.0, 1.0]]), 1.0, 1.0)
    torch.testing.assert_close(returns, torch.tensor([[1.0, 9.6, 1.0]]))


def test_reinforce_plus_plus_returns_by_hand():
    # gamma 0.5, rewards (0, 1, 7) with mask (1, 1, 0): t=2 is masked: return 0, nothing carried (running 0);
    # t=1: G = 1; t=0: G = 0 + 0.5*1 = 0.5. Returns (0.5, 1, 0); advantages whiten only (0.5, 1): ±0.707107.
    rewards, mask = torch.tensor([[0.0, 1.0, 7.0]]), torch.tensor([[1.0, 1.0, 0.0]])
    advantages, returns = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=0.5)
    torch.testing.assert_close(returns, torch.tensor([[0.5, 1.0, 0.0]]))
    torch.testing.assert_close(advantages, torch.tensor([[-0.707107, 0.707107, 0.0]]), rtol=1e-4, atol=1e-4)


def test_reinforce_plus_plus_carries_the_return_across_observation_tokens():
    # verl #7278. gamma 0.5, mask (1, 0, 0, 1), reward 4 on the last token: t=3: G = 4; t=2, t=1 (a tool
    # observation): return 0, the running 4 passes undiscounted; t=0: G = 0 + 0.5*4 = 2. Returns (2, 0, 0, 4).
    # The old reset gave t=0 a return of 0: the first assistant turn never saw the final reward.
    rewards, mask = torch.tensor([[0.0, 0.0, 0.0, 4.0]]), torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    _, returns = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=0.5)
    torch.testing.assert_close(returns, torch.tensor([[2.0, 0.0, 0.0, 4.0]]))


def _insert_observation_columns(tensor, columns, fill):
    """`tensor (B, T)` with a column of `fill` inserted before each index of `columns` (original positions)."""
    parts, start = [], 0
    for column in columns:
        parts += [tensor[:, start:column], torch.full((tensor.shape[0], 1), fill, dtype=tensor.dtype)]
        start = column
    return torch.cat(parts + [tensor[:, start:]], dim=1)


@pytest.mark.parametrize("seed", [0, 1])
def test_observation_tokens_leave_valid_returns_unchanged(seed):
    """Inserting mask-0 observation tokens between assistant tokens changes no valid token's return or
    advantage, for REINFORCE++ (verl #7278) and GAE (verl skips values and TD errors on them)."""
    rewards, mask, _ = random_batch(seed)
    mask[:, :3] = 1.0  # every row has at least 3 assistant tokens, so the insertions land inside responses
    rewards = torch.randn(rewards.shape, generator=torch.Generator().manual_seed(seed)) * mask
    values = torch.randn(rewards.shape, generator=torch.Generator().manual_seed(seed + 5))
    columns = [1, 2, 2]
    wide_rewards = _insert_observation_columns(rewards, columns, 0.0)
    wide_mask = _insert_observation_columns(mask, columns, 0.0)
    wide_values = _insert_observation_columns(values, columns, 3.0)  # a critic's guess there must not matter
    valid = wide_mask.bool()
    plain = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=0.9)
    wide = compute_reinforce_plus_plus_outcome_advantage(wide_rewards, wide_mask, gamma=0.9)
    for got, want in zip(wide, plain):
        torch.testing.assert_close(got[valid], want[mask.bool()])
    assert torch.all(wide[1][~valid] == 0)  # observation positions get return 0
    plain = compute_gae_advantage_return(rewards, values, mask, gamma=0.9, lam=0.8)
    wide = compute_gae_advantage_return(wide_rewards, wide_values, wide_mask, gamma=0.9, lam=0.8)
    for got, want in zip(wide, plain):
        torch.testing.assert_close(got[valid], want[mask.bool()])


def test_remax_by_hand():
    # rewards (1, 0, 2) mask (1, 1, 0): returns = reverse cumsum of (1, 0, 0) = (1, 0, 0); baseline 0.25
    # advantages = returns - 0.25*mask = (0.75, -0.25, 0)
    advantages, returns = compute_remax_outcome_advantage(
        torch.tensor([[1.0, 0.0, 2.0]]), torch.tensor([0.25]), torch.tensor([[1.0, 1.0, 0.0]]))
    torch.testing.assert_close(returns, torch.tensor([[1.0, 0.0, 0.0]]))
    torch.testing.assert_close(advantages, torch.tensor([[0.75, -0.25, 0.0]]))


def test_rloo_by_hand_and_singletons():
    # group of 3 with scores 3, 0, 6: a_i = s_i - mean(others): 3 - 3 = 0, 0 - 4.5 = -4.5, 6 - 1.5 = 4.5
    # singleton score 2: `rloo` keeps 2 (verl's loop skips n == 1), `rloo_vectorized` gives 0
    rewards = torch.tensor([[3.0], [0.0], [6.0], [2.0]])
    mask = torch.ones(4, 1)
    index = ["g", "g", "g", "solo"]
    loop_style, _ = compute_rloo_outcome_advantage(rewards, mask, index)
    vectorized_style, _ = compute_rloo_vectorized_outcome_advantage(rewards, mask, index)
    torch.testing.assert_close(loop_style[:, 0], torch.tensor([0.0, -4.5, 4.5, 2.0]))
    torch.testing.assert_close(vectorized_style[:, 0], torch.tensor([0.0, -4.5, 4.5, 0.0]))


# ---- against the loop references on random inputs (size-1 groups, masked tails) ----

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_group_estimators_match_verl_loops(seed):
    rewards, mask, uids = random_batch(seed)
    scores = rewards.sum(-1)
    for norm_by_std in (True, False):
        expected = reference_group_advantage(scores, uids, "grpo", norm_by_std=norm_by_std)[:, None] * mask
        actual, _ = compute_grpo_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=norm_by_std)
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    expected_rloo = reference_group_advantage(scores, uids, "rloo")[:, None] * mask
    torch.testing.assert_close(compute_rloo_outcome_advantage(rewards, mask, uids)[0], expected_rloo)
    baseline = reference_group_advantage(scores, uids, "rf++baseline")[:, None].tile(1, mask.shape[1]) * mask
    expected_rfpp = masked_whiten(baseline, mask) * mask
    actual_rfpp, _ = compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, uids)
    torch.testing.assert_close(actual_rfpp, expected_rfpp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_gae_matches_scalar_loop(seed):
    rewards, mask, _ = random_batch(seed)
    mask[0, 1] = 0.0  # an observation token inside a response
    values = torch.randn(rewards.shape, generator=torch.Generator().manual_seed(seed + 10)) * mask
    expected_advantages, expected_returns = reference_gae(rewards, values, mask, gamma=0.95, lam=0.9)
    advantages, returns = compute_gae_advantage_return(rewards, values, mask, gamma=0.95, lam=0.9)
    torch.testing.assert_close(returns, expected_returns)
    torch.testing.assert_close(advantages, expected_advantages)


def test_index_as_numpy_list_or_tensor_gives_identical_results():
    rewards, mask, uids = random_batch(3)
    as_numbers = {uid: number for number, uid in enumerate(sorted(set(uids)))}
    variants = [uids, list(uids), torch.tensor([as_numbers[u] for u in uids]), [str(u) for u in uids]]
    results = [compute_grpo_outcome_advantage(rewards, mask, index)[0] for index in variants]
    for result in results[1:]:
        assert torch.equal(result, results[0])


def test_index_length_mismatch_raises():
    with pytest.raises(ValueError, match="one uid per response row"):
        compute_grpo_outcome_advantage(torch.zeros(3, 2), torch.ones(3, 2), ["a", "b"])


def test_whitening_needs_two_valid_tokens():
    with pytest.raises(ValueError, match="single element"):
        compute_reinforce_plus_plus_outcome_advantage(torch.ones(1, 2), torch.tensor([[1.0, 0.0]]), gamma=1.0)
