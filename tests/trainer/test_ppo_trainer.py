"""End-to-end trainer runs on CPU with a tiny model: losses, parameter updates, resume, determinism."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from hybridrl.config import ConfigError, load_config
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.trainer.helpers import local_worker, tiny_run_overrides

VOLATILE = ("timing_s/", "timing_per_token_ms/", "perf/")


def read_metrics(out_dir: str) -> list[dict]:
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def stable(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith(VOLATILE)}


def train(overrides: list[str]) -> PPOTrainer:
    trainer = PPOTrainer(load_config(overrides))
    trainer.fit()
    return trainer


@pytest.mark.parametrize("algo,extra", [
    ("gae", []),
    ("grpo", ["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.1"]),
])
def test_two_steps_finite_losses_and_parameters_change(tmp_path, arith_model_dir, arithmetic_files, algo, extra):
    cfg = load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path), algo=algo, extra=extra))
    trainer = PPOTrainer(cfg)
    before = {k: v.clone() for k, v in local_worker(trainer).actor.model.state_dict().items()}
    trainer.fit()
    after = local_worker(trainer).actor.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "actor parameters did not change"
    records = read_metrics(str(tmp_path))
    assert [r["step"] for r in records] == [1, 2]
    keys = ["actor/pg_loss", "actor/grad_norm", "actor/entropy", "critic/score/mean"]
    keys += ["critic/vf_loss", "critic/values/mean"] if algo == "gae" else ["actor/kl_loss"]
    for record in records:
        for key in keys:
            assert math.isfinite(record[key]), (key, record[key])
    if algo == "grpo":
        assert trainer.roles.critic is None and trainer.roles.reference is not None


def test_resume_equals_uninterrupted_run(tmp_path, arith_model_dir, arithmetic_files):
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    common = ["trainer.save_freq=2", "actor_rollout_ref.actor.use_kl_loss=true",
              "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive"]
    train(tiny_run_overrides(arith_model_dir, arithmetic_files, straight, steps=4, extra=common))
    train(tiny_run_overrides(arith_model_dir, arithmetic_files, resumed, steps=2, extra=common))
    assert open(os.path.join(resumed, "latest_checkpointed_iteration.txt")).read().strip() == "2"
    train(tiny_run_overrides(arith_model_dir, arithmetic_files, resumed, steps=4,
                             extra=common + ["trainer.resume_mode=auto"]))
    a, b = read_metrics(straight), read_metrics(resumed)
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b):
        assert stable(ra) == pytest.approx(stable(rb), rel=1e-6, abs=1e-7), ra["step"]


def test_same_seed_same_metrics(tmp_path, arith_model_dir, arithmetic_files):
    runs = []
    for name in ("a", "b"):
        out = str(tmp_path / name)
        train(tiny_run_overrides(arith_model_dir, arithmetic_files, out))
        runs.append([stable(r) for r in read_metrics(out)])
    assert runs[0] == runs[1]


def test_metrics_file_has_verl_names(tmp_path, arith_model_dir, arithmetic_files):
    train(tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path), algo="gae",
                             extra=["trainer.test_freq=1", "trainer.val_before_train=true"]))
    records = read_metrics(str(tmp_path))
    names = set().union(*records)
    expected = {
        "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/grad_norm", "actor/lr",
        "critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/score/mean", "critic/score/max",
        "critic/score/min", "critic/rewards/mean", "critic/advantages/mean", "critic/returns/mean",
        "critic/values/mean", "critic/vf_explained_var", "response_length/mean", "response_length/max",
        "response_length/min", "response_length/clip_ratio", "prompt_length/mean", "timing_s/gen",
        "timing_s/reward", "timing_s/old_log_prob", "timing_s/values", "timing_s/adv", "timing_s/update_critic",
        "timing_s/update_actor", "timing_s/update_weights", "timing_s/step", "timing_s/testing",
        "timing_per_token_ms/gen", "perf/total_num_tokens", "perf/time_per_step", "perf/throughput",
        "perf/max_memory_allocated_gb", "training/global_step", "training/epoch",
        "val-core/arithmetic/reward/mean@1",
    }
    assert expected <= names, sorted(expected - names)
    assert records[0]["step"] == 0 and "val-core/arithmetic/reward/mean@1" in records[0]


def test_invalid_batch_sizes_fail_before_any_model_load(tmp_path, arithmetic_files):
    overrides = tiny_run_overrides("/nonexistent/model", arithmetic_files, str(tmp_path),
                                   extra=["actor_rollout_ref.actor.ppo_mini_batch_size=3"])
    with pytest.raises(ConfigError) as err:
        PPOTrainer(load_config(overrides))
    assert "3" in str(err.value) and "8" in str(err.value)


def test_hybrid_engine_backend_on_cpu_tracks_actor_weights(tmp_path, arith_model_dir, arithmetic_files):
    """rollout.name=hybrid slots in behind the same interface; weight sync keeps engine == actor."""
    from tests.trainer.engine_sync import assert_engine_matches_actor

    overrides = [o for o in tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path))
                 if o != "actor_rollout_ref.rollout.name=hf"]
    trainer = PPOTrainer(load_config(overrides + ["actor_rollout_ref.rollout.name=hybrid",
                                                  "actor_rollout_ref.rollout.dtype=float32"]))
    trainer.fit()
    assert_engine_matches_actor(trainer)
    last = read_metrics(str(tmp_path))[-1]
    assert last["training/rollout_probs_diff_mean"] < 1e-5
    assert 0 <= last["training/rollout_log_probs_diff_mean"] <= last["training/rollout_log_probs_diff_max"] < 1e-3


@pytest.mark.parametrize("algo", ["rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"])
def test_other_estimators_run_from_config(tmp_path, arith_model_dir, arithmetic_files, algo):
    """Each estimator runs through the same loop; remax adds the greedy-baseline phase (timing_s/gen_max)."""
    dump_dir = str(tmp_path / "rollouts")
    train(tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path), algo=algo, steps=1,
                             extra=[f"trainer.rollout_data_dir={dump_dir}"]))
    record = read_metrics(str(tmp_path))[0]
    assert math.isfinite(record["actor/pg_loss"]) and ("timing_s/gen_max" in record) == (algo == "remax")
    dumped = [json.loads(line) for line in open(os.path.join(dump_dir, "1.jsonl"))]
    assert len(dumped) == 32 and {"input", "output", "score", "step"} <= set(dumped[0])
