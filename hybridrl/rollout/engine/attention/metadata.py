"""The per-step inputs every attention layer reads, built once per step by the model runner."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AttentionMetadata:
    """Per-step inputs of every attention layer. N new tokens, B sequences, M blocks per sequence.

    slot_mapping int64 (N,); block_tables int32 (B, M); context_lens int32 (B,) = tokens in the cache
    after this step. Prefill only: sequence b's new tokens are rows query_start[b]:query_start[b + 1] of
    the flattened queries (int32 (B + 1,)), the longest run max_seqlen_q of them.
    """

    is_prefill: bool
    slot_mapping: torch.Tensor
    block_tables: torch.Tensor
    context_lens: torch.Tensor
    query_start: torch.Tensor | None = None
    max_seqlen_q: int = 1
    # the torch prefill path's per-step values (its padded query grid, one mask per sliding window), built by
    # the first layer that needs them and shared by the rest
    torch_prefill_cache: dict = field(default_factory=dict, repr=False)
