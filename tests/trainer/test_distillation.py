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


@pytest.fixture(scope="module")
def confident_teacher_dir(tmp_path_factory) -> str:
    """A teacher whose next-token distributions are peaked (LM head x 8), far from the near-uniform student."""
    from hybridrl.models.tiny import save_tiny_model_dir

    path = save_tiny_model_dir(str(tmp_path_factory.mktemp("confident")), arch="qwen2", seed=3, chars=ARITH_CHARS,
                               hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=96,
                               max_position_embeddings=64)
    model = load_causal_lm(path)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    model.save_pretrained(path)
    return path


def kl_to_teacher(student: torch.nn.Module, teacher_path: str) -> float:
    """KL(teacher || student) of the next-token distributions, averaged over every position of 32 fixed
    sequences of the task's characters."""
    ids = torch.randint(3, 15, (32, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        teacher = torch.log_softmax(load_causal_lm(teacher_path)(ids).logits.float(), -1)
        own = torch.log_softmax(student(ids).logits.float(), -1)
    return (teacher.exp() * (teacher - own)).sum(-1).mean().item()


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "margin"), [
    (["distillation.distillation_loss.loss_mode=forward_kl_topk", "distillation.distillation_loss.topk=8"], 0.5),
    (["distillation.distillation_loss.loss_mode=k3"], 0.75),
], ids=["forward_kl_topk", "k3"])
def test_distillation_only_brings_the_student_to_the_teacher(tmp_path, arith_model_dir, arithmetic_files,
                                                             confident_teacher_dir, mode, margin):
    """8 steps of distillation alone (use_task_rewards=false): the KL to the teacher drops below `margin` x its
    start (measured 2.30 -> 0.25 for forward_kl_topk, 2.30 -> 1.05 for k3), and the logged loss falls."""
    before = kl_to_teacher(load_causal_lm(arith_model_dir), confident_teacher_dir)
    trainer, records = run(tmp_path, arith_model_dir, arithmetic_files, confident_teacher_dir, *mode,
                           "actor_rollout_ref.actor.optim.lr=1e-2", steps=8)
    after = kl_to_teacher(local_worker(trainer).actor.model, confident_teacher_dir)
    assert after < margin * before, (before, after)
    losses = [record["actor/distillation/loss"] for record in records]
    assert losses[-1] < 0.5 * losses[0], losses


def test_two_ranks_with_two_teachers_give_the_distillation_metrics_of_one_process(tmp_path, arith_model_dir,
                                                                                   arithmetic_files, teacher_dir):
    """FSDP2 over 2 CPU ranks (the teachers' and the student's top-k passes registered as FSDP forward methods),
    rows routed by data_source to one of two teachers (the other scores the shard too: its forwards are
    collectives): the same distillation metrics as one process."""
    from tests.trainer.test_multi_process import overrides

    teachers = ["distillation.enabled=true", "distillation.distillation_loss.use_task_rewards=false",
                "distillation.distillation_loss.loss_mode=forward_kl_topk", "distillation.distillation_loss.topk=6",
                "+distillation.teacher_models.arith.key=arithmetic",
                f"+distillation.teacher_models.arith.model_path={teacher_dir}",
                "+distillation.teacher_models.unused.key=gsm8k",
                f"+distillation.teacher_models.unused.model_path={arith_model_dir}"]
    records = {}
    for ranks in (1, 2):
        out = str(tmp_path / f"ranks{ranks}")
        PPOTrainer(load_config(overrides(arith_model_dir, arithmetic_files, out, ranks=ranks, steps=2,
                                         extra=teachers))).fit()
        records[ranks] = read_metrics(out)
    for one, two in zip(records[1], records[2]):
        for key in ("actor/distillation/loss", "actor/distillation/loss_max", "actor/distillation/teacher_mass",
                    "actor/distillation/student_mass_min", "actor/grad_norm"):
            assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key


def test_the_asynchronous_trainer_distils_too(tmp_path, arith_model_dir, arithmetic_files, teacher_dir):
    """trainer.v1.trainer_mode=colocate_async runs the same step phases: the teacher scores each trained batch."""
    from hybridrl.trainer.main_ppo import make_trainer

    out = str(tmp_path / "async")
    cfg = load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out, extra=distill_overrides(
        teacher_dir, "trainer.v1.trainer_mode=colocate_async", "trainer.v1.sampler.max_off_policy_threshold=2",
        "actor_rollout_ref.rollout.name=hybrid")))
    make_trainer(cfg).fit()
    records = read_metrics(out)
    assert len(records) == 2 and all(math.isfinite(r["actor/distillation/loss"]) for r in records)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [["distillation.distillation_loss.loss_mode=k3"],
                                  ["distillation.distillation_loss.loss_mode=forward_kl_topk",
                                   "distillation.distillation_loss.topk=4"]], ids=["k3", "forward_kl_topk"])
def test_gpu_two_steps_with_the_hybrid_engine_distil(tmp_path, arith_model_dir, arithmetic_files, teacher_dir, mode):
    """On a GPU (bf16 autocast, the fused Triton log-prob path, the hybrid engine): the teacher phase runs and the
    logged loss is finite."""
    from tests.trainer.helpers import gpu_run_overrides

    overrides = gpu_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path), extra=[
        "trainer.device=cuda", "trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.name=auto",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.05", *distill_overrides(teacher_dir, *mode)])
    PPOTrainer(load_config(overrides)).fit()
    records = read_metrics(str(tmp_path))
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert math.isfinite(record["actor/distillation/loss"]) and record["timing_s/teacher"] > 0
