"""GPU: the trainer with our rollout engine as the default backend (`rollout.name=auto` → hybrid)."""

from __future__ import annotations

import json
import math
import os

import pytest

from hybridrl.config import load_config
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.trainer.engine_sync import assert_engine_matches_actor
from tests.trainer.helpers import tiny_run_overrides

pytestmark = pytest.mark.gpu


def test_two_step_grpo_with_hybrid_engine_and_weight_sync(tmp_path, arith_model_dir, arithmetic_files):
    overrides = tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path), extra=[
        "trainer.device=cuda", "trainer.n_gpus_per_node=1",  # one process, even where more GPUs are visible
        "actor_rollout_ref.rollout.name=auto", "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.05",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32"])  # fp32 actor forward too (GPU: bf16)
    overrides = [o for o in overrides if not o.startswith(("trainer.device=cpu", "actor_rollout_ref.rollout.name=hf"))]
    trainer = PPOTrainer(load_config(overrides))
    engine = trainer.roles.rollout.backend
    assert type(engine).__name__ == "LLMEngine"
    trainer.fit()
    records = [json.loads(line) for line in open(os.path.join(str(tmp_path), "metrics.jsonl"))]
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert math.isfinite(record["actor/pg_loss"]) and math.isfinite(record["actor/grad_norm"])
        # fp32 engine, but Triton dots run in TF32 on Hopper: ~1e-3 probability noise is expected.
        assert record["training/rollout_probs_diff_mean"] < 5e-3
    assert_engine_matches_actor(trainer)
