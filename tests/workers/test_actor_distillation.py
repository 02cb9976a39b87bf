"""The actor's distillation term: the student's top-k forward against a direct HF computation, the same with
and without padding removal (verl's top-k symmetry check), and the update's actor/distillation/* metrics."""

from __future__ import annotations

import pytest
import torch

from hybridrl.algorithms.distill_topk import forward_kl_topk
from tests.workers.helpers import build_actor, ragged_batch

TOPK = 4


def distill_args(*extra: str) -> list[str]:
    return ["distillation.enabled=true", "distillation.teacher_models.teacher_model.model_path=/unused/by/the/actor",
            *extra]


def with_teacher(batch, topk: int = TOPK, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    rows, width = batch["responses"].shape
    batch["teacher_ids"] = torch.randint(0, 60, (rows, width, topk), generator=gen)
    batch["teacher_logprobs"] = torch.log_softmax(torch.randn(rows, width, topk + 1, generator=gen), -1)[..., :topk]
    return batch


@pytest.mark.parametrize(("remove_padding", "chunks"), [
    (False, []), (True, []),
    (True, ["+distillation.distillation_loss.use_chunked_topk=true",  # verl's opt-in chunking: 7-token chunks
            "+distillation.distillation_loss.chunked_topk_chunk_size=7"]),
])
def test_student_topk_forward_equals_a_direct_hf_computation(tiny_model_dir, remove_padding, chunks):
    actor = build_actor(tiny_model_dir, distill_args("distillation.distillation_loss.loss_mode=forward_kl_topk",
                                                     f"distillation.distillation_loss.topk={TOPK}",
                                                     "distillation.distillation_loss.log_prob_min_clamp=-6",
                                                     f"actor_rollout_ref.model.use_remove_padding={remove_padding}",
                                                     *chunks))
    assert actor.distillation.chunk_rows == (7 if chunks else None)
    batch = with_teacher(ragged_batch())
    batch.meta["temperature"] = 0.8
    with torch.no_grad():
        log_prob, _, out = actor.distillation.forward(actor.model, batch, False, remove_padding)
        logits = actor.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             position_ids=batch["position_ids"]).logits.float()
    student = torch.log_softmax(logits[:, -11:-1] / 0.8, -1)
    want = forward_kl_topk(student.gather(-1, batch["teacher_ids"]), batch["teacher_logprobs"], batch["teacher_ids"],
                           torch.topk(student, TOPK, -1).indices, log_prob_min_clamp=-6)
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(log_prob[mask], student.gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)[mask],
                               rtol=1e-4, atol=1e-4)
    for key in ("distillation_losses", "student_mass", "teacher_mass", "overlap_count", "overlap_token_advantage"):
        torch.testing.assert_close(out[key][mask], want[key][mask], rtol=1e-4, atol=1e-4, msg=key)


def test_update_reports_verls_distillation_metrics_and_the_loss_of_identical_teacher_is_zero(tiny_model_dir):
    actor = build_actor(tiny_model_dir, distill_args("distillation.distillation_loss.use_task_rewards=false"))
    batch = ragged_batch()
    batch["old_log_probs"] = actor.compute_log_prob(batch)["old_log_probs"]
    batch["teacher_logprobs"] = batch["old_log_probs"].clone()  # the teacher is the student: k3 = 0 everywhere
    metrics = actor.update_actor(batch)
    assert metrics["actor/distillation/loss"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["actor/distillation/loss_max"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["actor/distillation/abs_loss"] == pytest.approx(0.0, abs=1e-6)
    assert "actor/pg_loss" in metrics  # the task loss is reported, not trained on (use_task_rewards=false)


def test_distillation_loss_adds_to_the_task_loss_with_its_coefficient(tiny_model_dir):
    """Gradients: task + coef x distillation, so the coefficient's effect is linear in the loss."""
    grads = {}
    for coef in (0.0, 1.0, 2.0):
        actor = build_actor(tiny_model_dir, distill_args(f"distillation.distillation_loss.distillation_loss_coef={coef}",
                                                         "actor_rollout_ref.actor.optim.lr=0"))
        batch = ragged_batch()
        batch["teacher_logprobs"] = batch["old_log_probs"] - 0.5
        actor.update_actor(batch)
        grads[coef] = torch.cat([p.grad.flatten() for p in actor.model.parameters() if p.grad is not None])
    torch.testing.assert_close(grads[2.0] - grads[1.0], grads[1.0] - grads[0.0], rtol=1e-3, atol=1e-6)
    assert not torch.allclose(grads[1.0], grads[0.0])
