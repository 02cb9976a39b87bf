"""Forward passes shared by the actor, reference and critic workers.

Log-probs are computed on response positions only: the body's hidden states at positions
`P-1 .. P+R-2` predict response tokens `0 .. R-1` (verl's `[:, -R-1:-1]` shift), logits are divided by
the rollout temperature, and the LM head is applied chunk by chunk so the fp32 logits of a whole
micro-batch (B·R × vocab) are never materialised at once. The same chunks give the entropy and, when asked
(`actor.calculate_sum_pi_squared`, for the optimal token baseline), Σ_v π(v)² per token.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import torch

from hybridrl.algorithms import token_stats_from_hidden
from hybridrl.models.hf import decoder_of, unwrap_peft
from hybridrl.models.invariant import uses_batch_invariant_numerics
from hybridrl.utils.batch import Batch
from hybridrl.workers.micro_batches import MicroBatches
from hybridrl.workers.padding import (Alignment, Trim, align_sequences, find_alignment, find_trim, pad_responses,
                                      take_columns, trim_sequences)
from hybridrl.workers.sequence_split import LocalPositions, SequenceSlice, ulysses_of

LOGPROB_CHUNK_ROWS = 1024  # CPU / torch path: fp32 logits, a dozen passes over each chunk
FUSED_CHUNK_LOGIT_BYTES = 1 << 30  # CUDA / Triton path: logits in the GEMM's dtype, ~1 GiB per chunk
FSDP_LOG_PROB_METHOD = "hybridrl_response_log_probs"


def _body_hidden(model: torch.nn.Module, batch: Batch | dict[str, torch.Tensor]) -> torch.Tensor:
    body = decoder_of(model)
    out = body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
               position_ids=batch["position_ids"], use_cache=False)
    return out.last_hidden_state


@dataclass(frozen=True)
class ResponseStats:
    """Per response token `(B, R)`: log-probs, and entropies and Σπ² where asked for (else None)."""

    log_probs: torch.Tensor
    entropy: torch.Tensor | None = None
    sum_pi_squared: torch.Tensor | None = None


def response_log_probs(model: torch.nn.Module, batch: Batch, temperature: float, compute_entropy: bool,
                       remove_padding: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log_probs (B, R), entropy (B, R) or None) of `batch["responses"]` under `model` (`response_stats`)."""
    stats = response_stats(model, batch, temperature, compute_entropy, remove_padding=remove_padding)
    return stats.log_probs, stats.entropy


def response_stats(model: torch.nn.Module, batch: Batch, temperature: float, compute_entropy: bool,
                   compute_sum_pi_squared: bool = False, remove_padding: bool = False) -> ResponseStats:
    """Log-probs, entropies and Σπ² `(B, R)` of `batch["responses"]` under `model`.

    `remove_padding`: the forward sees only the columns that hold a token of some row, rows aligned left
    with no attention mask where they allow it (padding.py); the dropped response columns come back as zeros.
    """
    tensors = {key: batch[key] for key in ("input_ids", "attention_mask", "position_ids", "responses")}
    layout = None
    if remove_padding:
        tensors, layout = drop_padding(tensors, batch["attention_mask"], batch["response_mask"])
    columns = layout.response_columns() if layout is not None else None
    args = (tensors["input_ids"], tensors["attention_mask"], tensors["position_ids"], tensors["responses"],
            temperature, compute_entropy, columns, compute_sum_pi_squared)
    fsdp_forward = getattr(model, FSDP_LOG_PROB_METHOD, None)
    outputs = fsdp_forward(*args) if fsdp_forward is not None else _response_log_probs(model, *args)
    if layout is not None:
        outputs = tuple(pad_responses(values, layout) for values in outputs)
    return ResponseStats(*outputs)


def drop_padding(tensors: dict[str, torch.Tensor], attention_mask: torch.Tensor, response_mask: torch.Tensor
                 ) -> tuple[dict[str, torch.Tensor | None], Alignment | Trim]:
    """The sequence tensors without padding columns: rows aligned left (no mask) when every row is one run of
    tokens, else the all-padding columns trimmed (mask kept)."""
    alignment = find_alignment(attention_mask, response_mask, tensors["position_ids"])
    if alignment is not None:
        return align_sequences(tensors, alignment), alignment
    trim = find_trim(attention_mask, response_mask)
    return trim_sequences(tensors, trim), trim


def enable_fsdp_log_prob_forward(model: torch.nn.Module) -> None:
    """Route `response_log_probs` on an FSDP2 `model` through FSDP's forward hooks.

    The log-prob path calls the body and the LM head weight directly, never `model.forward`, so the root
    unit's parameters (embeddings, final norm, head) would stay sharded; as a registered forward method
    they are gathered before it and their gradients reduce-scattered in backward, as for `forward`.
    """
    from torch.distributed.fsdp import register_fsdp_forward_method

    setattr(model, FSDP_LOG_PROB_METHOD, types.MethodType(_fsdp_response_log_probs, model))
    register_fsdp_forward_method(model, FSDP_LOG_PROB_METHOD)


def _fsdp_response_log_probs(*args) -> tuple[torch.Tensor | None, ...]:
    # Fresh tensors, not views: FSDP hooks backward on the outputs, which an in-place op on a view would drop.
    return tuple(values.clone() if values is not None else None for values in _response_log_probs(*args))


def _response_log_probs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                        position_ids: torch.Tensor, responses: torch.Tensor, temperature: float,
                        compute_entropy: bool, response_columns: torch.Tensor | None = None,
                        compute_sum_pi_squared: bool = False) -> tuple[torch.Tensor | None, ...]:
    """(log-probs, entropy or None, Σπ² or None), each (B, R): a tuple, whose tensors FSDP's hooks can see."""
    num_rows, response_len = responses.shape
    head = unwrap_peft(model).get_output_embeddings()
    batch_invariant = uses_batch_invariant_numerics(model)

    def stats_of(hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        stats = token_stats_from_hidden(
            hidden, head.weight, labels, temperature=temperature,
            chunk_size=log_prob_chunk_rows(hidden, head.weight.shape[0]), compute_entropy=compute_entropy,
            compute_sum_pi_squared=compute_sum_pi_squared, lm_head_bias=getattr(head, "bias", None),
            batch_invariant=batch_invariant)
        return stats.log_probs, stats.entropy, stats.sum_pi_squared

    sp = ulysses_of(model)
    if sp is not None:  # this rank's slice of the sequence; the group sums the response positions it holds
        part, positions = _split_sequences(input_ids, attention_mask, position_ids, response_len, response_columns, sp)
        hidden = positions.take(_body_hidden(model, part.model_inputs()))
        return tuple(positions.combine(list(stats_of(hidden, positions.labels(responses))), sp))
    hidden = _body_hidden(model, {"input_ids": input_ids, "attention_mask": attention_mask,
                                  "position_ids": position_ids})
    hidden = _response_positions(hidden, response_len, response_columns)
    stats = stats_of(hidden.reshape(num_rows * response_len, -1), responses.reshape(-1))
    return tuple(values.view(num_rows, response_len) if values is not None else None for values in stats)


def _split_sequences(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor,
                     response_len: int, columns: torch.Tensor | None, sp) -> tuple[SequenceSlice, LocalPositions]:
    """This rank's slice of the sequences, and the response positions predicted from its columns (`columns`: the
    aligned rows' own, else verl's shift: the `response_len` columns before the last)."""
    num_rows, width = input_ids.shape
    if columns is None:
        first = width - response_len - 1
        columns = (first + torch.arange(response_len, device=input_ids.device)).expand(num_rows, -1)
    part = SequenceSlice.of(input_ids, attention_mask, position_ids, sp)
    return part, part.local_positions(columns.to(input_ids.device))


def _response_positions(outputs: torch.Tensor, response_len: int, columns: torch.Tensor | None) -> torch.Tensor:
    """Per-column outputs (B, W[, H]) at the columns that predict the response tokens: the per-row
    `columns` of aligned rows, else the `response_len` columns before the last (verl's shift)."""
    if columns is not None:
        return take_columns(outputs, columns)
    prompt_len = outputs.shape[1] - response_len
    return outputs[:, prompt_len - 1: prompt_len - 1 + response_len]


def log_prob_chunk_rows(hidden: torch.Tensor, vocab: int) -> int:
    """Rows per LM-head chunk. On CUDA (fused kernels) as many as fit ~1 GiB of bf16 logits, in multiples of
    512 (3072 for a 152k vocabulary): fewer, larger GEMMs, and the fp32 weight-gradient accumulator is
    read and written once per chunk (~2 GB of traffic per chunk at a 152k vocabulary)."""
    if not hidden.is_cuda:
        return LOGPROB_CHUNK_ROWS
    rows = FUSED_CHUNK_LOGIT_BYTES // (2 * vocab) // 512 * 512
    return max(LOGPROB_CHUNK_ROWS, min(rows, 8192))


def response_values(critic: torch.nn.Module, batch: Batch, remove_padding: bool = False) -> torch.Tensor:
    """Values (B, R) of a token-classification critic, taken with the same shift as log-probs (0 where
    response_mask is 0); `remove_padding` as for `response_log_probs`."""
    tensors = {key: batch[key] for key in ("input_ids", "attention_mask", "position_ids")}
    response_mask = batch["response_mask"]
    layout = None
    if remove_padding:
        tensors, layout = drop_padding(tensors, batch["attention_mask"], response_mask)
    response_len = layout.response_width if layout is not None else response_mask.shape[1]
    columns = layout.response_columns() if layout is not None else None
    sp = ulysses_of(critic)
    if sp is not None:  # as for log-probs: this rank's slice, the response positions summed over the group
        part, positions = _split_sequences(tensors["input_ids"], tensors["attention_mask"], tensors["position_ids"],
                                           response_len, columns, sp)
        local = critic(**part.model_inputs(), use_cache=False).logits.squeeze(-1).float()
        values = positions.combine([positions.take(local)], sp)[0]
    else:
        values = critic(**tensors, use_cache=False).logits.squeeze(-1).float()
        values = _response_positions(values, response_len, columns)
    if layout is not None:
        values = pad_responses(values, layout)
    return values * response_mask


@torch.no_grad()
def batched_log_probs(model: torch.nn.Module, micro_batches: MicroBatches, temperature: float,
                      compute_entropy: bool, remove_padding: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`response_log_probs` (fp32) over the micro-batches, in the row order of the batch they came from."""
    stats = batched_response_stats(model, micro_batches, temperature, compute_entropy, remove_padding=remove_padding)
    return stats.log_probs, stats.entropy


@torch.no_grad()
def batched_response_stats(model: torch.nn.Module, micro_batches: MicroBatches, temperature: float,
                           compute_entropy: bool, compute_sum_pi_squared: bool = False,
                           remove_padding: bool = False) -> ResponseStats:
    """`response_stats` (fp32) over the micro-batches, in the row order of the batch they came from."""
    parts = [response_stats(model, micro, temperature, compute_entropy, compute_sum_pi_squared, remove_padding)
             for micro in micro_batches.parts]

    def joined(values: list[torch.Tensor | None]) -> torch.Tensor | None:
        if values[0] is None:
            return None
        return micro_batches.restore(torch.cat([v.float() for v in values if v is not None]))

    log_probs = joined([part.log_probs for part in parts])
    assert log_probs is not None
    return ResponseStats(log_probs, joined([part.entropy for part in parts]),
                         joined([part.sum_pi_squared for part in parts]))
