"""On-policy distillation in tiny CPU runs: the teachers' log-probs reach the actor's loss and move the student
towards the teacher."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.models.hf import load_causal_lm
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.trainer.helpers import local_worker, tiny_run_overrides
from tests.trainer.test_ppo_trainer import read_metrics

ARITH_CHARS = "0123456789+="


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory) -> str:
    """A teacher of the arithmetic student's vocabulary, wider and with other weights."""
    from hybridrl.models.tiny import save_tiny_model_dir

    return save_tiny_model_dir(str(tmp_path_factory.mktemp("teacher")), arch="qwen2", seed=3, chars=ARITH_CHARS,
                               hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=96,
                               max_position_embeddings=64)


def distill_overrides(teacher: str, *extra: str) -> list[str]:
    return ["distillation.enabled=true", f"distillation.teacher_models.teacher_model.model_path={teacher}",
            "distillation.distillation_loss.use_task_rewards=false", *extra]


def run(tmp_path, model_dir, files, teacher, *extra, steps=2) -> tuple[PPOTrainer, list[dict]]:
    out = str(tmp_path / "run")
    cfg = load_config(tiny_run_overrides(model_dir, files, out, steps=steps, extra=distill_overrides(teacher, *extra)))
    trainer = PPOTrainer(cfg)
    trainer.fit()
    return trainer, read_metrics(out)


@pytest.mark.parametrize("mode", [
    ["distillation.distillation_loss.loss_mode=k3"],
    ["distillation.distillation_loss.loss_mode=forward_kl_topk", "distillation.distillation_loss.topk=4"],
    ["distillation.distillation_loss.loss_mode=k1", "distillation.distillation_loss.use_policy_gradient=true"],
], ids=["k3", "forward_kl_topk", "k1_policy_gradient"])
def test_two_steps_log_a_finite_distillation_loss_and_move_the_student(tmp_path, arith_model_dir, arithmetic_files,
                                                                        teacher_dir, mode):
    trainer, records = run(tmp_path, arith_model_dir, arithmetic_files, teacher_dir, *mode)
    assert len(records) == 2
    for record in records:
        assert math.isfinite(record["actor/distillation/loss"])
        assert record["actor/distillation/loss_min"] <= record["actor/distillation/loss_max"]
        assert record["timing_s/teacher"] > 0
    initial = load_causal_lm(arith_model_dir)
    moved = [not torch.equal(a, b) for a, b in zip(local_worker(trainer).actor.model.parameters(), initial.parameters())]
    assert any(moved)


def test_topk_mode_logs_the_mass_metrics(tmp_path, arith_model_dir, arithmetic_files, teacher_dir):
    _, records = run(tmp_path, arith_model_dir, arithmetic_files, teacher_dir,
                     "distillation.distillation_loss.loss_mode=forward_kl_topk", "distillation.distillation_loss.topk=17",
                     steps=1)
    record = records[0]
    # top-17 of the 17-token vocabulary is the whole distribution: both masses are 1
    assert record["actor/distillation/teacher_mass"] == pytest.approx(1.0, abs=1e-4)
    assert record["actor/distillation/student_mass"] == pytest.approx(1.0, abs=1e-4)
    assert record["actor/distillation/overlap_ratio"] == pytest.approx(1.0)
