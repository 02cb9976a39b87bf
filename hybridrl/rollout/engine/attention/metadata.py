"""The per-step inputs every attention layer reads, built once per step by the model runner."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AttentionMetadata:
    """Per-step inputs of every attention layer. N new tokens, B sequences, M blocks per sequence.

    slot_mapping int64 (N,); block_tables int32 (B, M); context_lens int32 (B,) = tokens in the cache
    after this step. Prefill only: sequence b's new tokens are rows query_start[b]:query_start[b + 1] of
    the flattened queries (int32 (B + 1,), the Triton path); token_seq_idx / token_q_idx int64 (N,) place
    each new token in a padded (B, max_seqlen_q) query grid and query_lens int64 (B,) counts each
    sequence's new tokens (the torch path).
    """

    is_prefill: bool
    slot_mapping: torch.Tensor
    block_tables: torch.Tensor
    context_lens: torch.Tensor
    token_seq_idx: torch.Tensor | None = None
    token_q_idx: torch.Tensor | None = None
    query_lens: torch.Tensor | None = None
    query_start: torch.Tensor | None = None
    max_seqlen_q: int = 1
    # torch prefill: attention masks by sliding window, built by the first layer that needs one, shared by the rest
    prefill_masks: dict = field(default_factory=dict, repr=False)
