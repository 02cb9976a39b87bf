"""`use_remove_padding`: drop the columns of a micro-batch that are padding in every row.

Layout (hybridrl/workers/forward.py): each row is `prompt (P, left-padded) | response (R, right-padded)`,
and the hidden state at column `P-1+j` predicts response token `j`. Trimming keeps that shift: the
prompt part loses its leading all-padding columns (down to the micro-batch's longest prompt, always
keeping column P-1), the response part its trailing all-padding columns (down to the longest
response); outputs (B, R') are padded back to (B, R) with zeros, which fall where response_mask is 0.
Explicit position_ids travel with their columns, so positions (and RoPE) are unchanged.

verl's remove-padding packs rows into one unpadded sequence (flash-attn varlen). hybridrl's models use
sdpa, where packing needs an O(T^2) block-diagonal mask over the whole packed micro-batch and would be
slower than padded rows; trimming plus token-budget micro-batches of similar lengths (use_dynamic_bsz)
removes most of the padding instead (docs/design.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

SEQUENCE_KEYS = ("input_ids", "attention_mask", "position_ids")


@dataclass(frozen=True)
class Trim:
    left: int  # leading prompt columns dropped
    response_width: int  # response columns kept (R')
    full_response_width: int  # R

    @property
    def is_noop(self) -> bool:
        return self.left == 0 and self.response_width == self.full_response_width


def find_trim(attention_mask: torch.Tensor, response_mask: torch.Tensor) -> Trim:
    """Columns of a (B, P+R) micro-batch that hold no token of any row (response_mask (B, R) counts too)."""
    response_len = response_mask.shape[1]
    prompt_len = attention_mask.shape[1] - response_len
    prompt_used = attention_mask[:, :prompt_len].any(dim=0)
    first_prompt = int(prompt_used.int().argmax()) if bool(prompt_used.any()) else prompt_len - 1
    left = min(first_prompt, max(prompt_len - 1, 0))  # column P-1 predicts the first response token
    response_used = (attention_mask[:, prompt_len:] != 0) | (response_mask != 0)
    used_columns = response_used.any(dim=0).nonzero()
    width = int(used_columns[-1]) + 1 if used_columns.numel() else min(1, response_len)  # never an empty forward
    return Trim(left, width, response_len)


def trim_sequences(tensors: dict[str, torch.Tensor], trim: Trim) -> dict[str, torch.Tensor]:
    """(B, P+R) sequence tensors → (B, P-left+R'); `responses` (B, R) → (B, R'); other keys as they are."""
    drop_right = trim.full_response_width - trim.response_width
    out = dict(tensors)
    for key in SEQUENCE_KEYS:
        width = tensors[key].shape[1]
        out[key] = tensors[key][:, trim.left: width - drop_right]
    if "responses" in tensors:
        out["responses"] = tensors["responses"][:, :trim.response_width]
    return out


def pad_responses(values: torch.Tensor | None, trim: Trim) -> torch.Tensor | None:
    """(B, R') → (B, R) with zeros on the right (differentiable)."""
    if values is None or values.shape[1] == trim.full_response_width:
        return values
    return F.pad(values, (0, trim.full_response_width - values.shape[1]))
