"""The estimator table, its registry API (verl's names) and the uniform dispatcher."""

import numpy as np
import pytest
import torch

from hybridrl.algorithms import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    compute_advantage,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_remax_outcome_advantage,
    get_adv_estimator_fn,
    masked_whiten,
    register_adv_est,
)

VERL_ESTIMATORS = {  # registered by verl at its January and August 2026 trees (core_algos.py)
    "gae", "grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "reinforce_plus_plus",
    "reinforce_plus_plus_baseline", "remax", "opo", "gpg", "grpo_passk", "gdpo", "optimal_token_baseline",
    "tir_optimal_token_baseline",
}

REWARDS = torch.tensor([[0.0, 1.0], [0.0, 0.0], [2.0, 0.0], [0.5, 0.0]])
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
INDEX = np.array(["a", "a", "b", "b"], dtype=object)


def test_table_holds_verl_names_and_flags():
    assert VERL_ESTIMATORS <= set(ADVANTAGE_ESTIMATORS)
    assert {member.value for member in AdvantageEstimator} == VERL_ESTIMATORS
    assert [n for n, s in ADVANTAGE_ESTIMATORS.items() if s.needs_critic] == ["gae"]
    assert {n for n, s in ADVANTAGE_ESTIMATORS.items() if s.needs_sum_pi_squared} == {
        "optimal_token_baseline", "tir_optimal_token_baseline"}
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


@pytest.mark.parametrize("name", sorted(VERL_ESTIMATORS))
def test_every_estimator_runs_through_the_dispatcher(name):
    advantages, returns = compute_advantage(
        name, token_level_rewards=REWARDS, response_mask=MASK, index=INDEX, values=torch.zeros_like(REWARDS),
        reward_baselines=torch.zeros(4), old_log_probs=torch.full_like(REWARDS, -1.0),
        sum_pi_squared=torch.full_like(REWARDS, 0.3), reward_extra_info={"acc": [1, 0, 1, 1]},
        gdpo_reward_keys=["acc"])
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


def test_enum_members_and_names_look_up_the_same_function():
    assert get_adv_estimator_fn(AdvantageEstimator.OPO) is get_adv_estimator_fn("opo")
    assert get_adv_estimator_fn("grpo") is compute_grpo_outcome_advantage


def test_a_registered_estimator_gets_verl_style_inputs_and_config():
    seen = {}

    @register_adv_est("test_score_sign", needs_groups=True)
    def score_sign(token_level_rewards, response_mask, index, config=None, **kwargs):
        seen.update(gamma=config.gamma, norm=config.get("norm_adv_by_std_in_grpo"), extra=sorted(kwargs))
        scores = torch.sign(token_level_rewards.sum(-1) - 0.5)
        return scores.unsqueeze(-1) * response_mask, scores.unsqueeze(-1) * response_mask

    try:
        advantages, _ = compute_advantage("test_score_sign", token_level_rewards=REWARDS,
                                          response_mask=MASK, index=INDEX, gamma=0.9, norm_adv_by_std_in_grpo=False)
        torch.testing.assert_close(advantages[:, 0], torch.tensor([1.0, -1.0, 1.0, 0.0]))
        assert seen["gamma"] == 0.9 and seen["norm"] is False and "values" in seen["extra"]
        assert ADVANTAGE_ESTIMATORS["test_score_sign"].needs_groups
        register_adv_est("test_score_sign")(score_sign)  # the same function again: fine
        with pytest.raises(ValueError, match="already registered"):
            register_adv_est("grpo")(score_sign)
    finally:
        ADVANTAGE_ESTIMATORS.pop("test_score_sign", None)


# rollout.n = 1: every group has one response. What verl's definitions return then (scores 1, 0, 2, 0.5):
SCORES = REWARDS.sum(-1)
SINGLETONS = np.array(["a", "b", "c", "d"], dtype=object)


@pytest.mark.parametrize("name, expected", [
    ("grpo", SCORES / (1 + 1e-6)),  # mean 0, std 1
    ("grpo_vectorized", SCORES / (1 + 1e-6)),
    ("rloo", SCORES),  # verl's loop leaves a lone score as it is
    ("rloo_vectorized", torch.zeros(4)),  # verl's vectorized form multiplies by (n > 1)
    ("opo", SCORES),  # baseline 0
    ("gpg", SCORES * 4 / 3),  # mean 0, α = 4 rows / 3 non-zero scores
])
def test_one_response_per_prompt_follows_verl(name, expected):
    advantages, _ = compute_advantage(name, token_level_rewards=REWARDS, response_mask=MASK, index=SINGLETONS)
    torch.testing.assert_close(advantages, expected.unsqueeze(-1) * MASK)


def test_one_response_per_prompt_whitened_estimators_and_pass_at_k():
    baseline, _ = compute_advantage("reinforce_plus_plus_baseline", token_level_rewards=REWARDS, response_mask=MASK,
                                    index=SINGLETONS)  # mean 0: the scores themselves, whitened over the tokens
    torch.testing.assert_close(baseline, masked_whiten(SCORES.unsqueeze(-1) * MASK, MASK) * MASK)
    with pytest.raises(ValueError, match="at least 2 responses"):
        compute_advantage("grpo_passk", token_level_rewards=REWARDS, response_mask=MASK, index=SINGLETONS)
