"""The forward passes of a role with Ulysses sequence parallelism (`*.ulysses_sequence_parallel_size` > 1).

Every rank of a sequence-parallel group holds the same micro-batch (the dispatcher sends a group one shard).
`SequenceSlice` pads the (B, T) sequence tensors on the right to a multiple of the group size and keeps this
rank's columns; the model runs on that slice with `distributed.ulysses_attention` exchanging heads for sequence
inside attention. The outputs predicting response tokens are computed only where their column lies in this
rank's slice and summed over the group (`distributed.ulysses.sum_over_group`), so the LM head or value head
runs once per token over the group, and every rank ends with the whole (B, R) result.

Attention masks: rows aligned left (remove_padding) need none (causal is exact); otherwise the whole padded
sequence's mask goes to attention as a 4D boolean (B, 1, T, T): causal, keys where attention_mask is 1, and each
position attending to itself (a padding query then has a row to attend; its output is never used).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from hybridrl.distributed.ulysses import UlyssesGroup, sum_over_group

ULYSSES_ATTR = "_hybridrl_ulysses"  # set on a role's model by `workers.trainable` when its sp > 1


def ulysses_of(model: torch.nn.Module) -> UlyssesGroup | None:
    return getattr(model, ULYSSES_ATTR, None)


@dataclass(frozen=True)
class SequenceSlice:
    """This rank's columns `[start, start + width)` of the padded sequence, and the model's inputs for them."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None  # 4D over the whole padded sequence, or None (causal)
    start: int
    width: int

    @classmethod
    def of(cls, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor,
           sp: UlyssesGroup) -> "SequenceSlice":
        length = input_ids.shape[1]
        width = -(-length // sp.size)
        pad = width * sp.size - length
        if pad:
            input_ids = F.pad(input_ids, (0, pad))
            steps = torch.arange(1, pad + 1, device=position_ids.device)
            position_ids = torch.cat([position_ids, position_ids[:, -1:] + steps], dim=1)  # positions keep rising
            attention_mask = F.pad(attention_mask, (0, pad)) if attention_mask is not None else None
        start = sp.rank * width
        return cls(input_ids[:, start:start + width], position_ids[:, start:start + width],
                   _full_mask(attention_mask) if attention_mask is not None else None, start, width)

    def model_inputs(self) -> dict[str, torch.Tensor | None]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "position_ids": self.position_ids}

    def local_positions(self, columns: torch.Tensor) -> "LocalPositions":
        """Which response positions (B, R') predict from a column of this slice (`columns`: their columns)."""
        local = columns - self.start
        rows, responses = ((local >= 0) & (local < self.width)).nonzero(as_tuple=True)
        return LocalPositions(rows, responses, local[rows, responses], tuple(columns.shape))


def _full_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) 0/1 → (B, 1, T, T) bool: causal, keys that are tokens, and the diagonal."""
    length = attention_mask.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=attention_mask.device).tril()
    keys = attention_mask.bool()[:, None, None, :]
    diagonal = torch.eye(length, dtype=torch.bool, device=attention_mask.device)
    return (causal & keys) | diagonal


@dataclass(frozen=True)
class LocalPositions:
    """Response positions `(rows[i], responses[i])` whose predicting column `columns[i]` this rank holds."""

    rows: torch.Tensor
    responses: torch.Tensor
    columns: torch.Tensor
    shape: tuple[int, int]  # (B, R')

    def take(self, outputs: torch.Tensor) -> torch.Tensor:
        """Per-column outputs (B, width[, H]) of the slice at these positions → (N[, H]); N >= 1: a rank without
        response positions takes one column, weighted 0 in `combine`, so every parameter still gets a gradient
        (FSDP's reduce and the replicas' all-reduce expect one from every rank)."""
        if self.rows.numel() == 0:
            return outputs[:1, 0]
        return outputs[self.rows, self.columns]

    def labels(self, responses: torch.Tensor) -> torch.Tensor:
        """The response tokens (N,) at these positions (one token where `take` took a stand-in column)."""
        if self.rows.numel() == 0:
            return responses[:1, 0]
        return responses[self.rows, self.responses]

    def combine(self, values: list[torch.Tensor | None], sp: UlyssesGroup) -> list[torch.Tensor | None]:
        """Per-position values (N,) from `take`'s outputs → (B, R') each, summed over the group (one all-reduce)."""
        present = [v for v in values if v is not None]
        stacked = torch.stack([v.float() for v in present], dim=1)  # (N, k)
        out = stacked.new_zeros(*self.shape, len(present))
        if self.rows.numel():
            out = out.index_put((self.rows, self.responses), stacked)
        else:
            out = out + stacked.sum() * 0.0  # keeps the graph through the head (see `take`)
        summed = iter(sum_over_group(out, sp).unbind(-1))
        return [next(summed) if v is not None else None for v in values]


def apply_sequence_parallel(model: torch.nn.Module, size: int, size_key: str) -> UlyssesGroup | None:
    """Give `model` Ulysses attention over this rank's group of `size` ranks (None: size 1, nothing to do);
    collective the first time a size is used (every rank of the role's group calls it in the same order)."""
    if size == 1:
        return None
    from hybridrl.distributed.ulysses import ulysses_group
    from hybridrl.models.hf import unwrap_peft
    from hybridrl.distributed.ulysses_attention import enable_ulysses

    sp = ulysses_group(size)
    enable_ulysses(unwrap_peft(model), sp, size_key)
    setattr(model, ULYSSES_ATTR, sp)
    return sp
