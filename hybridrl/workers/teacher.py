"""The teacher role of on-policy distillation: frozen models (one per `distillation.teacher_models` entry),
each loaded from its model_path, that score the student's responses (workers/distill_forward.py).

A teacher is built like the reference policy (`trainable.build_frozen`): on this rank's device, sharded and in
the precision actor_rollout_ref.ref.fsdp_config gives, its parameters on the CPU between its forwards when
that section's param_offload is set, in micro-batches of the reference's size (`ref.*`). Each row goes to the
teacher whose key equals the row's `distillation.teacher_key` field (the controller turns that field into the
`teacher_index` tensor, role_groups.GroupTeacher); one teacher serves every row.
"""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.algorithms.distillation import get_distillation_loss_settings
from hybridrl.config.distillation_rules import TeacherSpec, resolve_teachers
from hybridrl.config.schema import HybridRLConfig
from hybridrl.models.hf import load_causal_lm, load_tokenizer
from hybridrl.utils.batch import Batch
from hybridrl.workers.distill_forward import teacher_log_probs
from hybridrl.workers.micro_batches import MicroBatchPlan
from hybridrl.workers.trainable import Frozen, RoleSpec, build_frozen

TEACHER_INDEX_KEY = "teacher_index"  # (B,) which teacher (its position in resolve_teachers) scores each row


class TeacherWorker:
    def __init__(self, cfg: HybridRLConfig, micro_batch_size: int, device: torch.device, student_tokenizer: Any
                 ) -> None:
        model_cfg = cfg.actor_rollout_ref.model
        self.specs = resolve_teachers(cfg)
        loss = cfg.distillation.distillation_loss
        self.topk = loss.topk if get_distillation_loss_settings(loss.loss_mode).use_topk else None
        self.device = device
        self.remove_padding = model_cfg.use_remove_padding  # as the reference
        self.plan = MicroBatchPlan.for_phase(cfg, "ref", micro_batch_size)
        self.chunk_rows = loss.chunked_topk_chunk_size if loss.use_chunked_topk else None  # None: sized by memory
        self.num_ids = len(student_tokenizer)  # top-k ids among real tokens (a head may be padded past them)
        if self.topk is not None and self.topk > self.num_ids:
            raise ValueError(f"distillation.distillation_loss.topk ({self.topk}) exceeds the vocabulary "
                             f"({self.num_ids} tokens) of the student and teacher; set topk <= {self.num_ids} "
                             "(verl's examples use 32 to 128)")
        self.models = []
        for spec in self.specs:
            check_same_vocabulary(spec, model_cfg.path, student_tokenizer, model_cfg.trust_remote_code)
            self.models.append(_build_teacher(cfg, spec, device))

    def compute_teacher_log_probs(self, batch: Batch) -> Batch:
        """`teacher_logprobs` (B, R) or (B, R, k) and, for top-k, `teacher_ids` (B, R, k) of every row, each from
        the teacher `batch["teacher_index"]` names."""
        index = batch[TEACHER_INDEX_KEY]
        parts: list[tuple[torch.Tensor, Batch]] = []
        for position, frozen in enumerate(self.models):
            rows = torch.nonzero(index == position).flatten()
            if not frozen.parallel.single_device:
                # a sharded teacher's forwards are collectives: every rank runs the same number of them, so each
                # scores its whole shard and keeps its own rows (several teachers then cost that many passes)
                scored = self._score(frozen, batch)
                parts.append((rows, scored.index(rows.tolist())))
            elif len(rows):
                parts.append((rows, self._score(frozen, batch.index(rows.tolist()))))
        return _scatter_rows(parts, len(batch))

    def _score(self, frozen: Frozen, rows: Batch) -> Batch:
        with frozen.offloader.for_compute(), frozen.parallel.autocast():
            micro_batches = self.plan.split(rows.to(self.device), frozen.parallel.max_over_ranks)
            outs = [teacher_log_probs(frozen.model, micro, self.topk, self.remove_padding, self.num_ids,
                                      self.chunk_rows) for micro in micro_batches.parts]
        return Batch({key: micro_batches.restore(torch.cat([out[key] for out in outs])).cpu() for key in outs[0].tensors})


def _build_teacher(cfg: HybridRLConfig, spec: TeacherSpec, device: torch.device) -> Frozen:
    key = f"distillation.teacher_models.{spec.name}.model_path"
    model_cfg = cfg.actor_rollout_ref.model

    def load(master: torch.dtype, on: torch.device) -> torch.nn.Module:
        return load_causal_lm(spec.model_path, dtype=master, trust_remote_code=model_cfg.trust_remote_code, key=key,
                              fp32_residual=model_cfg.fp32_residual_stream).to(on)

    reference = RoleSpec.reference(cfg)
    return build_frozen(RoleSpec(f"teacher {spec.name}", reference.fsdp_key, reference.fsdp, compile=reference.compile,
                                 compile_key=reference.compile_key, log_prob_forward=True), device, load)


def check_same_vocabulary(spec: TeacherSpec, student_path: str, student_tokenizer: Any, trust_remote_code: bool
                          ) -> None:
    """The teacher's token ids must mean the student's (its log-probs are read at the student's tokens, verl
    requires the same): its tokenizer's vocabulary must equal the student's."""
    key = f"distillation.teacher_models.{spec.name}.model_path"
    teacher_tokenizer = load_tokenizer(spec.model_path, trust_remote_code=trust_remote_code, key=key)
    teacher_vocab, student_vocab = teacher_tokenizer.get_vocab(), student_tokenizer.get_vocab()
    if teacher_vocab == student_vocab:
        return
    differing = sorted(set(teacher_vocab.items()) ^ set(student_vocab.items()), key=lambda item: item[1])[:3]
    raise ValueError(
        f"{key}={spec.model_path} has another vocabulary than the student actor_rollout_ref.model.path={student_path} "
        f"({len(teacher_vocab)} vs {len(student_vocab)} tokens; first differences (token, id): {differing}): the "
        "teacher scores the student's token ids, so both must use the same tokenizer; pick a teacher of the "
        "student's model family (e.g. Qwen3-32B for Qwen3-8B)")


def _scatter_rows(parts: list[tuple[torch.Tensor, Batch]], num_rows: int) -> Batch:
    """The teachers' outputs back in the batch's row order."""
    first = parts[0][1]
    out = {key: value.new_zeros((num_rows, *value.shape[1:])) for key, value in first.tensors.items()}
    for rows, scored in parts:
        for key, value in scored.tensors.items():
            out[key][rows] = value
    return Batch(out)
