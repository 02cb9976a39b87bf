"""OPO, GPG, GRPO pass@k and GDPO estimators: hand-derived values."""

import pytest
import torch

from hybridrl.algorithms import (
    compute_advantage,
    compute_gdpo_outcome_advantage,
    compute_gpg_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_opo_outcome_advantage,
)

SQRT_HALF = 0.5**0.5  # std of two scores 0 and 1 (unbiased)


def test_opo_baseline_is_the_length_weighted_group_mean():
    # group g: scores 1, 0, 1 with lengths 2, 1, 3: b = (2·1 + 1·0 + 3·1) / 6 = 5/6 -> a = 1/6, -5/6, 1/6;
    # the singleton (score 2, length 1) keeps its score
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [2.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    advantages, returns = compute_opo_outcome_advantage(rewards, mask, ["g", "g", "g", "solo"])
    expected = torch.tensor([1 / 6, -5 / 6, 1 / 6, 2.0]).unsqueeze(-1) * mask
    torch.testing.assert_close(advantages, expected)
    assert torch.equal(returns, advantages)


def test_gpg_rescales_by_the_share_of_nonzero_scores():
    # scores 1, 0, 1 (group g) and 2 (alone): 3 of 4 non-zero, α = 4/3; group mean 2/3:
    # a = 4/3·(1/3) = 4/9, 4/3·(-2/3) = -8/9, 4/9; the singleton's mean is 0: 4/3·2 = 8/3
    rewards = torch.tensor([[1.0], [0.0], [1.0], [2.0]])
    advantages, _ = compute_gpg_outcome_advantage(rewards, torch.ones(4, 1), ["g", "g", "g", "solo"])
    torch.testing.assert_close(advantages[:, 0], torch.tensor([4 / 9, -8 / 9, 4 / 9, 8 / 3]))


def test_grpo_passk_gives_only_the_best_response_the_gap_to_the_runner_up():
    # group scores 1, 3, 2: best 3, runner-up 2, gap 1; std(1, 3, 2) = 1 -> 1/(1 + 1e-6) to row 1, 0 elsewhere;
    # group h scores 0, 5: gap 5, std 5/√2 -> √2 = 1.414213
    rewards = torch.tensor([[1.0], [3.0], [2.0], [0.0], [5.0]])
    index = ["g", "g", "g", "h", "h"]
    advantages, _ = compute_grpo_passk_outcome_advantage(rewards, torch.ones(5, 1), index)
    torch.testing.assert_close(advantages[:, 0], torch.tensor([0.0, 1 / (1 + 1e-6), 0.0, 0.0, 5 / (5 * SQRT_HALF + 1e-6)]))
    unnormalized, _ = compute_grpo_passk_outcome_advantage(rewards, torch.ones(5, 1), index,
                                                           norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(unnormalized[:, 0], torch.tensor([0.0, 1.0, 0.0, 0.0, 5.0]))


def test_grpo_passk_refuses_a_group_of_one():
    with pytest.raises(ValueError, match="rollout.n >= 2"):
        compute_grpo_passk_outcome_advantage(torch.ones(3, 1), torch.ones(3, 1), ["g", "g", "solo"])


GDPO_INDEX = ["a", "a", "b", "b"]
GDPO_COMPONENTS = {"acc": [1, 0, 1, 1], "format": [1.0, 1.0, 0.0, 1.0], "pred": ["x", "y", "x", "x"]}


def test_gdpo_normalizes_each_component_within_its_group_then_whitens():
    # acc: group a (1, 0) -> ±0.5/(√0.5 + 1e-6) = ±0.707106; group b (1, 1) -> 0.
    # format: group a (1, 1) -> 0; group b (0, 1) -> ∓0.707106. Weights (1, 0.5):
    # A = (0.707106, -0.707106, -0.353553, 0.353553), mean 0, unbiased var = (2·0.5 + 2·0.125)/3 = 0.416667,
    # whitened: A / 0.645497 = (1.095445, -1.095445, -0.547723, 0.547723)
    advantages, _ = compute_gdpo_outcome_advantage(torch.zeros(4, 1), torch.ones(4, 1), GDPO_INDEX,
                                                   reward_components=GDPO_COMPONENTS,
                                                   gdpo_reward_keys=["acc", "format"], gdpo_reward_weights=[1, 0.5])
    torch.testing.assert_close(advantages[:, 0], torch.tensor([1.095445, -1.095445, -0.547723, 0.547723]),
                               rtol=1e-5, atol=1e-5)


def test_gdpo_through_the_dispatcher_needs_keys_present_in_the_reward_extra_info():
    options = dict(token_level_rewards=torch.zeros(4, 2), response_mask=torch.ones(4, 2), index=GDPO_INDEX)
    with pytest.raises(ValueError, match="gdpo_reward_keys"):
        compute_advantage("gdpo", reward_extra_info=GDPO_COMPONENTS, **options)
    with pytest.raises(ValueError, match=r"\['style'\] are not among"):
        compute_advantage("gdpo", reward_extra_info=GDPO_COMPONENTS, gdpo_reward_keys=["acc", "style"], **options)
    with pytest.raises(ValueError, match="one weight per key"):
        compute_advantage("gdpo", reward_extra_info=GDPO_COMPONENTS, gdpo_reward_keys=["acc"],
                          gdpo_reward_weights=[1.0, 2.0], **options)
    single, _ = compute_advantage("gdpo", reward_extra_info=GDPO_COMPONENTS, gdpo_reward_keys=["acc"], **options)
    # acc alone: (0.707106, -0.707106, 0, 0) on both tokens of each row: 8 tokens, unbiased var = 4·0.5/7,
    # std 0.534522 -> ±1.322876
    torch.testing.assert_close(single, torch.tensor([1.322876, -1.322876, 0.0, 0.0]).unsqueeze(-1).expand(4, 2),
                               rtol=1e-5, atol=1e-5)
