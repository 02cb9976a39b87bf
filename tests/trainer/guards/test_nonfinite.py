"""Non-finite steps: an isolated one is skipped, logged and counted in its metrics; a run of them stops the run
with an error naming the first non-finite quantity of the chain and the keys that usually cause it."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from hybridrl.config import ConfigError, load_config
from hybridrl.config.index import schema_index
from hybridrl.config.validate import validate_config
from hybridrl.trainer.guards.nonfinite import (
    CHAIN,
    NonFiniteGuard,
    NonFiniteTrainingError,
    first_nonfinite,
    nonfinite_batch_metrics,
)
from hybridrl.trainer.ppo_trainer import PPOTrainer
from hybridrl.utils.batch import Batch
from tests.trainer.helpers import tiny_run_overrides
from tests.trainer.test_ppo_trainer import read_metrics


# ---------------------------------------------------------------- the chain, from metrics and batches
def test_every_key_the_chain_names_is_a_config_key():
    keys = schema_index()
    assert [key for quantity in CHAIN for key in quantity.keys if key not in keys] == []


def test_the_first_flagged_quantity_of_the_chain_is_named_data_before_the_update():
    metrics = {"actor/nonfinite/grad_norm": 0.5, "actor/nonfinite/pg_loss": 0.5, "training/nonfinite/advantages": 8.0,
               "training/nonfinite/token_level_scores": 0.0}
    assert first_nonfinite(metrics).metric == "training/nonfinite/advantages"
    del metrics["training/nonfinite/advantages"]
    assert first_nonfinite(metrics).metric == "actor/nonfinite/pg_loss"  # ranks may disagree: the earliest wins
    assert first_nonfinite({"actor/num_skipped_steps": 1.0}) is None


def test_batch_counts_are_over_response_tokens_and_only_where_there_are_any():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    scores = torch.tensor([[0.0, math.inf, math.nan], [0.0, 0.0, 0.0]])  # the NaN sits in padding
    advantages = torch.tensor([[math.nan, math.nan, 0.0], [-math.inf, 1.0, 1.0]])
    batch = Batch({"response_mask": mask, "token_level_scores": scores, "advantages": advantages,
                   "returns": torch.zeros(2, 3), "responses": torch.zeros(2, 3, dtype=torch.long)})
    assert nonfinite_batch_metrics(batch) == {"training/nonfinite/token_level_scores": 1.0,
                                              "training/nonfinite/advantages": 3.0}
    batch["sum_pi_squared"] = torch.tensor([[0.5, math.nan, math.nan], [0.5, 0.5, 0.5]])  # the optimal token baseline's
    assert nonfinite_batch_metrics(batch)["training/nonfinite/sum_pi_squared"] == 1.0
    assert first_nonfinite({"training/nonfinite/sum_pi_squared": 1.0, "training/nonfinite/advantages": 3.0}).metric == \
        "training/nonfinite/sum_pi_squared"


def guard(limit: int | None) -> NonFiniteGuard:
    return NonFiniteGuard(load_config([f"trainer.max_consecutive_nonfinite_steps={'null' if limit is None else limit}",
                                       "algorithm.lam=0.95"]))


SKIPPED = {"actor/num_skipped_steps": 2.0, "critic/num_skipped_steps": 0.0, "training/nonfinite/returns": 4.0}


def test_the_guard_counts_steps_in_a_row_and_a_clean_step_resets_it(caplog):
    checker = guard(2)
    checker.check(SKIPPED, 4)
    checker.check({"actor/num_skipped_steps": 0.0}, 5)  # a clean step: the run starts over
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        checker.check(SKIPPED, 6)
    assert ("step 6: 2 actor optimizer step(s) skipped for non-finite values (1 such step(s) in a row; the run stops "
            "after 2 in a row (trainer.max_consecutive_nonfinite_steps)). The first non-finite quantity: the returns, "
            "4 non-finite value(s) among the response tokens (training/nonfinite/returns)") in caplog.text
    assert "algorithm.lam=0.95" in caplog.text
    with pytest.raises(NonFiniteTrainingError, match=r"^2 steps in a row \(steps 6-7\) skipped optimizer steps") as info:
        checker.check(SKIPPED, 7)
    assert "algorithm.gamma=1.0, algorithm.lam=0.95" in str(info.value)
    assert "raise trainer.max_consecutive_nonfinite_steps (0 = never stop)" in str(info.value)


@pytest.mark.parametrize("limit", [0, None])
def test_zero_or_null_never_stops(limit):
    checker = guard(limit)
    for step in range(1, 20):
        checker.check(SKIPPED, step)
    assert len(checker.steps) == 19


def test_the_key_has_a_range():
    with pytest.raises(ConfigError, match="trainer.max_consecutive_nonfinite_steps"):
        validate_config(load_config(["trainer.max_consecutive_nonfinite_steps=-1"]))


# ---------------------------------------------------------------- tiny runs
def score_nan_in(trainer: PPOTrainer, steps: set[int]) -> None:
    """Row 0's score (on its last response token) becomes NaN in `steps`: what a reward model or a scorer that
    slipped past the reward checks would hand the trainer."""
    score = trainer.roles.reward.compute_scores

    def scored(batch, **kwargs):
        scores, extra, metrics = score(batch, **kwargs)
        if trainer.global_step in steps:
            last = int(batch["response_mask"][0].sum()) - 1
            scores["token_level_scores"][0, last] = math.nan
        return scores, extra, metrics

    trainer.roles.reward.compute_scores = scored


def test_an_isolated_nonfinite_step_is_skipped_counted_and_logged(tmp_path, arith_model_dir, arithmetic_files, caplog):
    trainer = PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path), steps=3)))
    score_nan_in(trainer, {2})
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        trainer.fit()
    records = read_metrics(str(tmp_path))
    assert [r["step"] for r in records] == [1, 2, 3]  # the run went on
    assert [r["actor/num_skipped_steps"] for r in records][::2] == [0.0, 0.0]
    second = records[1]
    assert 1 <= second["actor/num_skipped_steps"] <= 2  # the mini-batch(es) holding the NaN group: 2 per step
    assert second["training/nonfinite/token_level_scores"] == 1 and second["training/nonfinite/advantages"] >= 4
    assert second["actor/nonfinite/pg_loss"] >= 1  # on the rank: its loss was the first non-finite quantity
    assert not any(key.startswith("training/nonfinite/") for r in (records[0], records[2]) for key in r)
    assert "step 2: " in caplog.text and "(1 such step(s) in a row; the run stops after 5 in a row" in caplog.text
    assert "The first non-finite quantity: the scores (token_level_scores" in caplog.text
    assert "step 1: " not in caplog.text and "step 3: " not in caplog.text



def test_ranks_whose_first_nonfinite_quantity_differs_report_one_skipped_step(tmp_path, arith_model_dir,
                                                                             arithmetic_files, caplog):
    """Two worker ranks, each reporting the first non-finite quantity it saw (its pg_loss where NaN rows reached
    it, else the global gradient norm; tests/workers/test_nonfinite.py pools two that differ): the group's metrics
    pool, every skipped step is attributed once, and the step is named as in one process."""
    out = str(tmp_path)
    trainer = PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out, steps=2,
                                                        extra=["trainer.n_gpus_per_node=2"])))
    score_nan_in(trainer, {1})
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        trainer.fit()
    first, second = read_metrics(out)
    assert first["actor/num_skipped_steps"] >= 1 and second["actor/num_skipped_steps"] == 0
    assert first["actor/nonfinite/pg_loss"] + first["actor/nonfinite/grad_norm"] == first["actor/num_skipped_steps"]
    assert "step 1: " in caplog.text and "The first non-finite quantity: the scores (token_level_scores" in caplog.text

def test_steps_in_a_row_stop_the_run_naming_the_scores(tmp_path, arith_model_dir, arithmetic_files):
    out = str(tmp_path)
    trainer = PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out, steps=4,
                                                        extra=["trainer.max_consecutive_nonfinite_steps=2"])))
    score_nan_in(trainer, {2, 3, 4})
    with pytest.raises(NonFiniteTrainingError) as info:
        trainer.fit()
    message = str(info.value)
    assert message.startswith("2 steps in a row (steps 2-3) skipped optimizer steps for non-finite values "
                              "(trainer.max_consecutive_nonfinite_steps=2)")
    assert ("The first non-finite quantity: the scores (token_level_scores: what the reward function or reward model "
            "returned), 1 non-finite value(s) among the response tokens") in message
    assert "custom_reward_function.path=None" in message
    assert [r["step"] for r in read_metrics(out)] == [1, 2, 3]  # the failing step is logged first


def test_a_nan_coefficient_past_the_ranges_stops_the_run_naming_it(tmp_path, arith_model_dir, arithmetic_files):
    """The audit's `entropy_coeff=nan`: refused by the ranges now, but a NaN that gets past them (here set after
    validation) makes every optimizer step skip; the run stops and names the coefficient."""
    overrides = tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path), steps=3,
                                   extra=["trainer.max_consecutive_nonfinite_steps=2"])
    with pytest.raises(ConfigError, match="entropy_coeff"):
        validate_config(load_config(overrides + ["actor_rollout_ref.actor.entropy_coeff=nan"]))
    trainer = PPOTrainer(load_config(overrides))
    trainer.cfg.actor_rollout_ref.actor.entropy_coeff = math.nan  # the one-process worker reads this config
    with pytest.raises(NonFiniteTrainingError) as info:
        trainer.fit()
    message = str(info.value)
    assert "(steps 1-2)" in message and "step 2 skipped 2 actor optimizer step(s)" in message
    assert "the actor's total loss (pg_loss - entropy_coeff x entropy + kl_loss_coef x kl_loss) of finite terms" \
        in message
    assert "actor_rollout_ref.actor.entropy_coeff=nan" in message
