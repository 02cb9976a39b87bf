"""The estimator table and the uniform dispatcher."""

import numpy as np
import pytest
import torch

from hybridrl.algorithms import (
    ADVANTAGE_ESTIMATORS,
    compute_advantage,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_remax_outcome_advantage,
)

REWARDS = torch.tensor([[0.0, 1.0], [0.0, 0.0], [2.0, 0.0], [0.5, 0.0]])
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
INDEX = np.array(["a", "a", "b", "b"], dtype=object)


def test_table_holds_verl_names_and_flags():
    assert set(ADVANTAGE_ESTIMATORS) == {"gae", "grpo", "grpo_vectorized", "rloo", "rloo_vectorized",
                                         "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"}
    assert [n for n, s in ADVANTAGE_ESTIMATORS.items() if s.needs_critic] == ["gae"]
    assert [n for n, s in ADVANTAGE_ESTIMATORS.items() if s.needs_greedy_baseline] == ["remax"]
    assert ADVANTAGE_ESTIMATORS["grpo_vectorized"].fn is ADVANTAGE_ESTIMATORS["grpo"].fn
    assert not ADVANTAGE_ESTIMATORS["reinforce_plus_plus"].needs_groups


def test_dispatcher_passes_the_inputs_each_estimator_names():
    values = torch.tensor([[0.1, 0.2], [0.3, 0.0], [0.0, 0.5], [0.2, 0.2]])
    gae = compute_advantage("gae", token_level_rewards=REWARDS, response_mask=MASK, values=values, gamma=0.9, lam=0.7)
    for got, want in zip(gae, compute_gae_advantage_return(REWARDS, values, MASK, 0.9, 0.7)):
        assert torch.equal(got, want)
    dr_grpo = compute_advantage("grpo", token_level_rewards=REWARDS, response_mask=MASK, index=INDEX,
                                norm_adv_by_std_in_grpo=False)
    assert torch.equal(dr_grpo[0], compute_grpo_outcome_advantage(REWARDS, MASK, INDEX, 1e-6, False)[0])
    baselines = torch.tensor([1.0, 0.0, 0.0, 2.0])
    remax = compute_advantage("remax", token_level_rewards=REWARDS, response_mask=MASK, reward_baselines=baselines)
    assert torch.equal(remax[0], compute_remax_outcome_advantage(REWARDS, baselines, MASK)[0])


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_every_estimator_runs_through_the_dispatcher(name):
    advantages, returns = compute_advantage(
        name, token_level_rewards=REWARDS, response_mask=MASK, index=INDEX, values=torch.zeros_like(REWARDS),
        reward_baselines=torch.zeros(4))
    assert advantages.shape == returns.shape == REWARDS.shape
    assert torch.all(advantages[MASK == 0] == 0) or name == "gae"


def test_unknown_estimator_and_missing_inputs_raise():
    with pytest.raises(ValueError, match="reinforce_plus_plus_baseline"):
        compute_advantage("ppo", token_level_rewards=REWARDS, response_mask=MASK)
    with pytest.raises(ValueError, match="critic"):
        compute_advantage("gae", token_level_rewards=REWARDS, response_mask=MASK)
    with pytest.raises(ValueError, match="uid"):
        compute_advantage("rloo", token_level_rewards=REWARDS, response_mask=MASK)
    with pytest.raises(ValueError, match="greedy"):
        compute_advantage("remax", token_level_rewards=REWARDS, response_mask=MASK)
