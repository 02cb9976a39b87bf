"""DAPO dynamic sampling: rounds over hand-built groups (the kept set, the round count, the loader's position),
and CPU runs of a DAPO-shaped config with a tiny model (two steps, resume parity, the end of the data)."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from hybridrl.config import ConfigError, load_config
from hybridrl.data.dataset import collate
from hybridrl.data.loader import StatefulLoader
from hybridrl.trainer.batch_sources.dynamic_sampling import (REWARD_EXTRA_KEY, DynamicSampler, DynamicSamplingError,
                                                             FilterSettings, RoundHooks, merge_round_metrics,
                                                             pop_reward_extra)
from hybridrl.trainer.ppo_trainer import PPOTrainer
from hybridrl.utils.batch import Batch
from hybridrl.utils.metrics import timed
from tests.trainer.helpers import tiny_run_overrides

N = 2  # responses per prompt
# prompt id -> the scores of its two responses; constant pairs are dropped
SCORES = {0: (1, 1), 1: (0, 1), 2: (0, 0), 3: (1, 1),  # round 0 of step 1: keeps prompt 1
          4: (0, 1), 5: (1, 0), 6: (1, 1), 7: (0, 1),  # round 1: keeps 4, 5, 7 (7 is surplus)
          8: (0, 0), 9: (1, 1), 10: (0, 0), 11: (1, 1)}  # nothing varies


def loader() -> StatefulLoader:
    rows = [{"input_ids": [3, 4], "prompt_id": i} for i in range(len(SCORES))]
    return StatefulLoader(rows, 4, shuffle=False, collate_fn=lambda r: collate(r, pad_token_id=0, max_prompt_length=2))


def generate(prompts: Batch, metrics: dict, timings: dict, round_index: int) -> Batch:
    with timed("gen", timings):
        rows = prompts.repeat(N)
    metrics.update({"timing_s/gen_engine": 1.0, "rollout/kv_cache_peak_usage_max": 0.1 * (round_index + 1),
                    "rollout/num_preempted": 2.0, "rollout/mean_decode_step_s": float(round_index)})
    return rows


def score(rows: Batch) -> tuple[Batch, dict, dict]:
    values = [SCORES[p][i % N] for i, p in enumerate(rows["prompt_id"])]
    scores = torch.zeros(len(rows), 3)
    scores[:, -1] = torch.tensor(values, dtype=torch.float32)
    return Batch({"token_level_scores": scores}), {"acc": [bool(v) for v in values], "pred": list(values)}, \
        {"reward/num_errors": 1.0}


def sampler(data: StatefulLoader, *, metric: str = "acc", max_rounds: int = 0, total_epochs: int = 1) -> DynamicSampler:
    settings = FilterSettings(metric, groups_per_step=3, prompts_per_round=4, max_rounds=max_rounds)
    hooks = RoundHooks(generate, score, lambda name, timings: timed(name, timings))
    return DynamicSampler(settings, data, hooks, total_epochs=total_epochs, fixed_steps=False)


def first_round(data: StatefulLoader, step: int) -> Batch:
    prompts = data.next_batch()[0]
    prompts["uid"] = [f"{step}-{i}" for i in range(len(prompts))]
    return prompts


def test_rounds_until_enough_groups_vary_then_exactly_train_batch_size_groups():
    data, metrics, timings = loader(), {}, {}
    batch = sampler(data).collect(first_round(data, 1), 1, metrics, timings)
    assert list(batch["prompt_id"]) == [1, 1, 4, 4, 5, 5]  # prompt 7 kept too, but beyond train_batch_size
    assert list(batch["uid"]) == ["1-1", "1-1", "1.1-0", "1.1-0", "1.1-1", "1.1-1"]
    assert metrics["train/num_gen_batches"] == 2
    assert metrics["training/filter_groups/evicted_samples"] == 4  # prompts 0, 2, 3, 6
    assert metrics["training/filter_groups/discarded_surplus_samples"] == 1  # prompt 7
    assert (data.epoch, data.batch_index) == (0, 2)  # both rounds' prompts consumed
    assert timings["gen"] > 0 and timings["reward"] > 0
    extra = pop_reward_extra(batch)
    assert REWARD_EXTRA_KEY not in batch
    assert extra == {"acc": [False, True, False, True, True, False], "pred": [0, 1, 0, 1, 1, 0]}
    assert batch["token_level_scores"].sum(-1).tolist() == [0, 1, 0, 1, 1, 0]


def test_round_metrics_add_up_where_they_count_and_keep_the_last_round_otherwise():
    data, metrics = loader(), {}
    sampler(data).collect(first_round(data, 1), 1, metrics, {})
    assert metrics["timing_s/gen_engine"] == 2.0 and metrics["rollout/num_preempted"] == 4.0
    assert metrics["reward/num_errors"] == 2.0
    assert metrics["rollout/kv_cache_peak_usage_max"] == pytest.approx(0.2)
    assert metrics["rollout/mean_decode_step_s"] == 1.0  # the last round's
    assert merge_round_metrics([{"rollout/x_min": 3.0}, {"rollout/x_min": 1.0}]) == {"rollout/x_min": 1.0}


def test_the_round_limit_raises_with_what_the_dropped_groups_shared():
    data = loader()
    data.load_state_dict({"epoch": 0, "batch_index": 2, "seed": 0})  # prompts 8-11: nothing varies
    with pytest.raises(DynamicSamplingError) as caught:
        sampler(data, max_rounds=2).collect(first_round(data, 3), 3, {}, {})
    message = str(caught.value)
    assert "kept 1 of the 3 groups" in message and "after 2 generation batches of 4 prompts" in message
    assert "max_num_gen_batches=2" in message and "(4 at 1, 3 at 0)" in message  # 9, 11, 0, 3 | 8, 10, 2
    assert (data.epoch, data.batch_index) == (1, 1)  # the second round came from the next epoch


def test_seq_reward_filters_on_the_summed_score_and_an_unknown_metric_names_the_reward_keys():
    data = loader()
    batch = sampler(data, metric="seq_reward").collect(first_round(data, 1), 1, {}, {})
    assert list(batch["prompt_id"]) == [1, 1, 4, 4, 5, 5]
    with pytest.raises(ConfigError, match=r"metric='score' is not a value this run's reward gives: its per-row extra "
                                          r"info has \['acc', 'pred'\]"):
        sampler(loader(), metric="score").collect(first_round(data, 2), 2, {}, {})


def test_a_run_measured_in_epochs_ends_when_the_data_is_used():
    data = loader()
    shared = sampler(data, total_epochs=1)
    shared.collect(first_round(data, 1), 1, {}, {})
    assert shared.has_data()  # one round of epoch 0 left
    data.next_batch()
    assert not shared.has_data()
    assert DynamicSampler(shared.settings, data, shared.hooks, total_epochs=1, fixed_steps=True).has_data()


# ------------------------------------------------------------------ CPU runs with a tiny model
REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """1.0 when the response holds the digit 1: an untrained model's groups sometimes agree, sometimes not."""
    return float("1" in solution_str)
'''


def dapo_overrides(tmp_path, model_dir: str, files: tuple[str, str], out: str, *, steps: int | None = 2,
                   extra: tuple[str, ...] = ()) -> list[str]:
    """verl's DAPO recipe shape: grpo, clip-higher, token-mean, the dapo manager with its overlong buffer, filter_groups
    on acc with gen_batch_size = 2 x train_batch_size."""
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    overrides = tiny_run_overrides(model_dir, files, out, steps=steps or 1, extra=[
        "data.train_batch_size=4", "data.gen_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.clip_ratio_high=0.28", "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "reward_model.reward_manager=dapo", f"custom_reward_function.path={reward}",
        "reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=2",
        "reward_model.overlong_buffer.penalty_factor=1.0",
        "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
        "algorithm.filter_groups.max_num_gen_batches=20", *extra])
    return overrides if steps else [o for o in overrides if not o.startswith("trainer.total_training_steps")]


def records(out: str) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl")) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_two_dapo_steps_train_and_consume_exactly_the_rounds_taken(tmp_path, arith_model_dir, arithmetic_files):
    out = str(tmp_path / "run")
    trainer = PPOTrainer(load_config(dapo_overrides(tmp_path, arith_model_dir, arithmetic_files, out)))
    trainer.fit()
    steps = records(out)
    assert [r["step"] for r in steps] == [1, 2]
    for record in steps:
        assert math.isfinite(record["actor/pg_loss"]) and math.isfinite(record["actor/grad_norm"])
        assert record["train/num_gen_batches"] >= 1 and record["training/filter_groups/evicted_samples"] >= 0
        assert record["reward/overlong_reward/mean"] <= 0  # the dapo manager's buffer, from the rounds' scoring
        assert record["timing_s/reward"] > 0 and record["timing_s/gen"] > 0
    rounds = sum(int(r["train/num_gen_batches"]) for r in steps)
    assert (trainer.train_loader.epoch, trainer.train_loader.batch_index) == divmod(rounds, len(trainer.train_loader))


VOLATILE = ("timing_s/", "timing_per_token_ms/", "perf/")


def test_resume_mid_run_equals_the_uninterrupted_run(tmp_path, arith_model_dir, arithmetic_files):
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    save = ("trainer.save_freq=2", "data.gen_batch_size=4")  # rounds of 4 prompts: a step takes several
    PPOTrainer(load_config(dapo_overrides(tmp_path, arith_model_dir, arithmetic_files, straight, steps=4,
                                          extra=save))).fit()
    PPOTrainer(load_config(dapo_overrides(tmp_path, arith_model_dir, arithmetic_files, resumed, steps=2,
                                          extra=save))).fit()
    second = PPOTrainer(load_config(dapo_overrides(tmp_path, arith_model_dir, arithmetic_files, resumed, steps=4,
                                                   extra=save + ("trainer.resume_mode=auto",))))
    second.fit()
    a, b = records(straight), records(resumed)
    assert [r["step"] for r in b] == [1, 2, 3, 4] and sum(r["train/num_gen_batches"] for r in a) > 4
    for ra, rb in zip(a, b):
        stable = [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in (ra, rb)]
        assert stable[0] == pytest.approx(stable[1], rel=1e-6, abs=1e-7), ra["step"]


def test_without_a_step_count_the_run_ends_when_total_epochs_of_data_are_used(tmp_path, arith_model_dir,
                                                                            arithmetic_files, caplog):
    out = str(tmp_path / "run")
    trainer = PPOTrainer(load_config(dapo_overrides(
        tmp_path, arith_model_dir, arithmetic_files, out, steps=None,
        extra=("data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "trainer.total_epochs=1",
               "trainer.save_freq=100"))))
    trainer.fit()
    steps = records(out)
    assert trainer.total_steps == len(trainer.train_loader) == 8  # one step per round at most
    assert 1 <= len(steps) < trainer.total_steps and trainer.train_loader.epoch >= 1
    # the last step is the run's last: saved although save_freq was not reached
    assert open(os.path.join(out, "latest_checkpointed_iteration.txt")).read().strip() == str(steps[-1]["step"])
    assert "used trainer.total_epochs=1 passes over the data" in caplog.text
