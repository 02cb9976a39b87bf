"""GPU: the trainer with our rollout engine as the default backend (`rollout.name=auto` → hybrid)."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.trainer.engine_sync import assert_engine_matches_actor
from tests.trainer.helpers import gpu_run_overrides, local_worker
from tests.trainer.test_ppo_trainer import read_metrics

pytestmark = pytest.mark.gpu


def test_two_step_grpo_with_hybrid_engine_and_weight_sync(tmp_path, arith_model_dir, arithmetic_files):
    overrides = gpu_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path), extra=[
        "trainer.device=cuda", "trainer.n_gpus_per_node=1",  # one process, even where more GPUs are visible
        "actor_rollout_ref.rollout.name=auto", "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.05",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32"])  # fp32 actor forward too (GPU: bf16)
    trainer = PPOTrainer(load_config(overrides))
    engine = local_worker(trainer).rollout.backend
    assert type(engine).__name__ == "LLMEngine"
    trainer.fit()
    records = read_metrics(str(tmp_path))
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert math.isfinite(record["actor/pg_loss"]) and math.isfinite(record["actor/grad_norm"])
        # fp32 engine, but Triton dots run in TF32 on Hopper: ~1e-3 probability noise is expected.
        assert record["training/rollout_probs_diff_mean"] < 5e-3
    assert_engine_matches_actor(trainer)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("tensor_parallel,fsdp_size", [(1, -1), (2, -1), (1, 1)])
def test_two_gpu_ranks_sync_weights_per_unit_and_report_rank_memory(tmp_path, arith_model_dir, arithmetic_files,
                                                                    tensor_parallel, fsdp_size):
    """Two colocated NCCL ranks: the engines on both ranks get the actor's weights through per-unit
    all-gathers (so step 2's rollout log-probs match the trainer's), and the step's memory figures come
    from the ranks (the controller holds nothing on the GPUs). tensor_parallel=2: one engine replica split
    over both GPUs, its NCCL all-reduces captured in the decode CUDA graphs like every other kernel.
    fsdp_size=1: whole replicas of the actor and reference, gradients averaged over NCCL."""
    overrides = gpu_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path), extra=[
        "trainer.device=cuda", "trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.name=hybrid",
        "actor_rollout_ref.rollout.dtype=float32", "actor_rollout_ref.rollout.gpu_memory_utilization=0.05",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={tensor_parallel}",
        f"actor_rollout_ref.actor.fsdp_config.fsdp_size={fsdp_size}", f"actor_rollout_ref.ref.fsdp_config.fsdp_size={fsdp_size}"])
    trainer = PPOTrainer(load_config(overrides))
    assert trainer.plan.on_ranks and not trainer.memory.enabled
    trainer.fit()
    records = read_metrics(str(tmp_path))
    assert [r["step"] for r in records] == [1, 2]
    assert records[0]["actor/grad_norm"] > 0
    assert records[1]["training/rollout_probs_diff_mean"] < 5e-3  # TF32 noise only: the synced weights are current
    for record in records:
        assert record["rollout/graph_capture_s"] > 0  # decode replays graphs (captured after each wake-up)
        assert record["perf/max_memory_allocated_gb"] > 0
        for phase in ("gen", "ref", "update_actor", "update_weights"):
            assert record[f"perf/max_memory_allocated_gb/{phase}"] > 0, phase


def test_a_model_reward_runs_on_the_controllers_gpu_in_bf16_beside_the_engine(tmp_path, arith_model_dir,
                                                                             arithmetic_files):
    """reward_model.enable with the defaults: the reward model on the controller's GPU in bf16 (it ran on the
    CPU in fp32 before session 14), scoring between the engine's generation and the update."""
    from hybridrl.models.hf import load_tokenizer, load_value_model

    rm_dir = str(tmp_path / "rm")
    torch.manual_seed(3)
    load_value_model(arith_model_dir).save_pretrained(rm_dir)
    load_tokenizer(arith_model_dir).save_pretrained(rm_dir)
    out = str(tmp_path / "run")
    overrides = gpu_run_overrides(arith_model_dir, arithmetic_files, out, extra=[
        "trainer.device=cuda", "trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.name=auto",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.05", "reward_model.enable=true",
        f"reward_model.model.path={rm_dir}", "reward_model.micro_batch_size_per_gpu=8"])
    trainer = PPOTrainer(load_config(overrides))
    weights = next(trainer.roles.reward.reward_model.replicas[0].parameters())
    assert weights.device == torch.device("cuda", 0) and weights.dtype == torch.bfloat16
    trainer.fit()
    records = read_metrics(out)
    assert [r["step"] for r in records] == [1, 2]
    assert all(math.isfinite(r["critic/score/mean"]) and r["critic/score/max"] != r["critic/score/min"]
               for r in records)  # scores from the model, varying by row


def test_batch_invariant_run_records_the_trainers_log_probs(tmp_path, arith_model_dir, arithmetic_files):
    """actor_rollout_ref.model.batch_invariant: the log-prob the engine records for each token equals the actor's
    old_log_prob bit for bit (bf16 engine, bf16-autocast actor on fp32 master weights)."""
    overrides = gpu_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path), extra=[
        "trainer.device=cuda", "trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.name=auto",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.05", "actor_rollout_ref.model.batch_invariant=true"])
    trainer = PPOTrainer(load_config(overrides))
    trainer.fit()
    records = read_metrics(str(tmp_path))
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert record["training/rollout_log_probs_diff_max"] == 0.0
        assert math.isfinite(record["actor/pg_loss"]) and math.isfinite(record["actor/grad_norm"])
