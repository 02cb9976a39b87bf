"""`use_remove_padding`: the model sees each micro-batch without its padding columns, and without a mask.

Layout (hybridrl/workers/forward.py): each row is `prompt (P, left-padded) | response (R, right-padded)`,
and the hidden state at column `P-1+j` predicts response token `j`. Two ways to drop the padding:

- Aligned rows (`find_alignment`, used whenever every row's tokens are one run that starts with a prompt):
  each row moves left to start at column 0, `prompt | response | padding`, cut to the longest row of the
  micro-batch. Padding is then only ever *after* a row's tokens, so plain causal attention is exact and the
  model gets no attention mask: sdpa runs its causal kernel instead of the masked one, which computes the
  whole S x S product and reads a (B, 1, S, S) mask (H200, B=113 rows of 415 columns, 14 heads of 64:
  cuDNN forward 1022 µs with HF's padding mask vs 212 µs causal; forward+backward 2409 vs 1033 µs). The
  hidden state predicting response token `j` of row `i` is then at column `p_i - 1 + j` (`p_i` its
  prompt's length): `response_columns`.
- Trimmed columns (`find_trim`, the fallback): the prompt part loses its leading all-padding columns
  (down to the micro-batch's longest prompt, always keeping column P-1), the response part its trailing
  all-padding columns; the mask stays.

Outputs (B, R') are padded back to (B, R) with zeros, which fall where response_mask is 0. Explicit
position_ids travel with their tokens, so positions (and RoPE) are unchanged.

verl's remove-padding packs rows into one unpadded sequence (flash-attn varlen). hybridrl's models use
sdpa, where packing needs an O(T^2) block-diagonal mask over the whole packed micro-batch and would be
slower than padded rows; aligned rows plus token-budget micro-batches of similar lengths (use_dynamic_bsz)
leave little padding and no mask instead (docs/design.md).
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

    def response_columns(self) -> None:
        """None: the hidden state predicting response token j is at column P'-1+j in every row (verl's shift)."""
        return None

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


def pad_responses(values: torch.Tensor | None, trim: "Trim | Alignment") -> torch.Tensor | None:
    """(B, R') → (B, R) with zeros on the right (differentiable)."""
    if values is None or values.shape[1] == trim.full_response_width:
        return values
    return F.pad(values, (0, trim.full_response_width - values.shape[1]))


@dataclass(frozen=True)
class Alignment:
    """Rows moved left by `shifts` (B,) columns, so each starts at column 0; `width` columns are kept."""

    shifts: torch.Tensor
    width: int
    prompt_width: int  # P, the prompt part's width in the padded layout
    response_width: int  # response columns kept (R')
    full_response_width: int  # R

    def response_columns(self) -> torch.Tensor:
        """(B, R') the column whose hidden state predicts each kept response token, per row."""
        first = self.prompt_width - 1 - self.shifts  # the last prompt token's column
        return first[:, None] + torch.arange(self.response_width, device=self.shifts.device)


def find_alignment(attention_mask: torch.Tensor, response_mask: torch.Tensor, position_ids: torch.Tensor
                   ) -> Alignment | None:
    """How to left-align a (B, P+R) micro-batch, or None when some row is not one run of tokens that ends its
    prompt at column P-1 with positions rising by one (an empty prompt, inner padding, custom positions):
    those keep the mask (`find_trim`). Transformers reads positions that do not rise by one, with no mask,
    as packed sequences and masks across them, so aligned rows need rising positions throughout."""
    response_len = response_mask.shape[1]
    prompt_len = attention_mask.shape[1] - response_len
    used = attention_mask != 0
    if prompt_len < 1:
        return None
    first = used.int().argmax(dim=1)
    last = used.shape[1] - 1 - used.flip(1).int().argmax(dim=1)
    one_run = (last - first + 1 == used.sum(dim=1)) & used[:, prompt_len - 1]
    rising = (position_ids.diff(dim=1) == 1) | ~(used[:, 1:] & used[:, :-1])
    if not bool(one_run.all() & rising.all()):  # one host sync for the checks
        return None
    trim = find_trim(attention_mask, response_mask)
    width = prompt_len - int(first.min()) + trim.response_width
    return Alignment(first, width, prompt_len, trim.response_width, response_len)


def align_sequences(tensors: dict[str, torch.Tensor], alignment: Alignment) -> dict[str, torch.Tensor]:
    """input_ids / position_ids (B, P+R) → (B, width), each row from its first token; attention_mask → None
    (causal attention is exact: padding only follows a row's tokens); `responses` (B, R) → (B, R').
    Columns past a row's end hold any token at positions that keep rising (not a packed sequence)."""
    full_width = tensors["input_ids"].shape[1]
    shifts = alignment.shifts.to(tensors["input_ids"].device)
    offsets = torch.arange(alignment.width, device=shifts.device)[None]
    out = dict(tensors)
    out["input_ids"] = tensors["input_ids"].gather(1, (offsets + shifts[:, None]).clamp_(max=full_width - 1))
    out["position_ids"] = tensors["position_ids"].gather(1, shifts[:, None]) + offsets
    out["attention_mask"] = None
    if "responses" in tensors:
        out["responses"] = tensors["responses"][:, :alignment.response_width]
    return out


def take_columns(outputs: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """outputs (B, W) or (B, W, H) at per-row `columns` (B, R') → (B, R') or (B, R', H) (differentiable)."""
    index = columns.to(outputs.device)
    if outputs.dim() == 3:
        index = index[..., None].expand(-1, -1, outputs.shape[2])
    return outputs.gather(1, index)
