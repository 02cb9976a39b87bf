"""Forward passes of on-policy distillation: the teacher's log-probs on the student's responses, and the
student's forward that also gives its log-probs at the teacher's top-k ids.

Both read the final hidden states at the response positions (forward.py's shift and padding removal) and
apply the LM head chunk by chunk (algorithms/distill_topk.py). Under FSDP2 the top-k passes are registered
forward methods (`enable_fsdp_distill_forward`), as `forward.response_log_probs` is, so the root unit's
parameters (embeddings, head) are gathered around them.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from hybridrl.algorithms import logprobs_and_entropy_from_hidden
from hybridrl.algorithms.distill_topk import forward_kl_topk, log_probs_at_ids_from_hidden, topk_log_probs_from_hidden
from hybridrl.models.hf import unwrap_peft
from hybridrl.utils.batch import Batch
from hybridrl.workers.forward import _body_hidden, _response_positions, drop_padding, log_prob_chunk_rows, response_log_probs

SEQUENCE_KEYS = ("input_ids", "attention_mask", "position_ids", "responses")
TOPK_CHUNK_LOGIT_BYTES = 1 << 30  # CUDA: ~1 GiB of fp32 logits per chunk of the top-k passes (a few temporaries)
TEACHER_TOPK_METHOD = "hybridrl_teacher_topk"
STUDENT_TOPK_METHOD = "hybridrl_student_topk"


def enable_fsdp_distill_forward(model: torch.nn.Module) -> None:
    """Register the top-k passes as FSDP2 forward methods of `model` (see forward.enable_fsdp_log_prob_forward)."""
    from torch.distributed.fsdp import register_fsdp_forward_method

    for name, fn in ((TEACHER_TOPK_METHOD, _teacher_topk), (STUDENT_TOPK_METHOD, _student_topk)):
        setattr(model, name, types.MethodType(fn, model))
        register_fsdp_forward_method(model, name)


def topk_chunk_rows(hidden: torch.Tensor, vocab: int, chosen: int | None = None) -> int:
    """Rows per LM-head chunk of the top-k passes, whose logits are fp32 (twice the fused log-prob path's bf16):
    `chosen` (distillation_loss.chunked_topk_chunk_size with use_chunked_topk), else on CUDA as many as fit
    TOPK_CHUNK_LOGIT_BYTES, in multiples of 256 (1536 rows at a 152k vocabulary)."""
    if chosen is not None:
        return chosen
    if not hidden.is_cuda:
        return log_prob_chunk_rows(hidden, vocab)
    return max(256, TOPK_CHUNK_LOGIT_BYTES // (4 * vocab) // 256 * 256)


def _call(model: torch.nn.Module, method: str, fn, *args):
    registered = getattr(model, method, None)
    return registered(*args) if registered is not None else fn(model, *args)


def _hidden_at_responses(model: torch.nn.Module, batch: Batch, remove_padding: bool
                         ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(hidden (B, R', H) predicting the first R' response tokens, responses (B, R'), R): with padding removal
    only the columns that hold a token of some row (R' <= R)."""
    tensors = {key: batch[key] for key in SEQUENCE_KEYS}
    full_width = tensors["responses"].shape[1]
    columns = None
    if remove_padding:
        tensors, layout = drop_padding(tensors, batch["attention_mask"], batch["response_mask"])
        columns = layout.response_columns()
    hidden = _body_hidden(model, tensors)
    responses = tensors["responses"]
    return _response_positions(hidden, responses.shape[1], columns), responses, full_width


def _pad_to(values: torch.Tensor, width: int) -> torch.Tensor:
    """(B, R', ...) → (B, R, ...) with zeros on the right of the response axis."""
    missing = width - values.shape[1]
    if missing == 0:
        return values
    return F.pad(values, (0, 0) * (values.dim() - 2) + (0, missing))


@torch.no_grad()
def teacher_log_probs(model: torch.nn.Module, batch: Batch, topk: int | None, remove_padding: bool,
                      num_ids: int | None = None, chunk_rows: int | None = None) -> Batch:
    """The teacher's log-probs on `batch`'s responses at temperature 1 (what verl's teacher servers return):
    `teacher_logprobs` (B, R) of the sampled tokens, or with `topk` its top-k `teacher_logprobs` (B, R, k)
    and `teacher_ids` (B, R, k) among the ids below `num_ids` (the student's tokens); zeros (ids 0) on padding."""
    if topk is None:
        log_probs, _ = response_log_probs(model, batch, 1.0, False, remove_padding)
        return Batch({"teacher_logprobs": log_probs.float()})
    values, ids = _call(model, TEACHER_TOPK_METHOD, _teacher_topk, batch, topk, remove_padding, num_ids, chunk_rows)
    return Batch({"teacher_logprobs": values, "teacher_ids": ids})


def _teacher_topk(model: torch.nn.Module, batch: Batch, topk: int, remove_padding: bool, num_ids: int | None,
                  chunk_rows: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    hidden, _, width = _hidden_at_responses(model, batch, remove_padding)
    rows, kept = hidden.shape[:2]
    head = unwrap_peft(model).get_output_embeddings()
    values, ids = topk_log_probs_from_hidden(hidden.reshape(rows * kept, -1), head.weight, topk,
                                             bias=getattr(head, "bias", None), num_ids=num_ids,
                                             chunk_rows=topk_chunk_rows(hidden, head.weight.shape[0], chunk_rows))
    return _pad_to(values.view(rows, kept, topk), width), _pad_to(ids.view(rows, kept, topk), width)


def student_topk_forward(model: torch.nn.Module, batch: Batch, temperature: float, compute_entropy: bool,
                         remove_padding: bool, log_prob_min_clamp: float | None, chunk_rows: int | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor]]:
    """(log_probs (B, R), entropy (B, R) or None, top-k outputs) of the student in one body forward: the
    top-k outputs are forward_kl_topk's (each (B, R)) against `batch["teacher_logprobs"]` / `["teacher_ids"]`
    (B, R, K), the student's logits divided by `temperature` as for its log-probs (verl's logits processor)."""
    return _call(model, STUDENT_TOPK_METHOD, _student_topk, batch, temperature, compute_entropy, remove_padding,
                 log_prob_min_clamp, chunk_rows)


def _student_topk(model: torch.nn.Module, batch: Batch, temperature: float, compute_entropy: bool,
                  remove_padding: bool, log_prob_min_clamp: float | None, chunk_rows: int | None):
    hidden, responses, width = _hidden_at_responses(model, batch, remove_padding)
    rows, kept = hidden.shape[:2]
    head = unwrap_peft(model).get_output_embeddings()
    bias, chunk = getattr(head, "bias", None), log_prob_chunk_rows(hidden, head.weight.shape[0])
    flat = hidden.reshape(rows * kept, -1)
    log_probs, entropy = logprobs_and_entropy_from_hidden(flat, head.weight, responses.reshape(-1),
                                                          temperature=temperature, chunk_size=chunk,
                                                          compute_entropy=compute_entropy, lm_head_bias=bias)
    teacher_ids = batch["teacher_ids"][:, :kept].long()
    topk = teacher_ids.shape[-1]
    student, own = log_probs_at_ids_from_hidden(flat, head.weight, teacher_ids.reshape(-1, topk),
                                                temperature=temperature, bias=bias,
                                                chunk_rows=topk_chunk_rows(hidden, head.weight.shape[0], chunk_rows))
    outputs = forward_kl_topk(student.view(rows, kept, topk), batch["teacher_logprobs"][:, :kept].float(),
                              teacher_ids, own.view(rows, kept, topk), log_prob_min_clamp)
    entropy = _pad_to(entropy.view(rows, kept), width) if entropy is not None else None
    # fresh tensors (not views): FSDP hooks backward on a registered method's outputs
    return (_pad_to(log_probs.view(rows, kept), width).clone(), entropy,
            {key: _pad_to(value, width).clone() for key, value in outputs.items()})
