"""One Triton kernel for what a decode burst does between two steps: record the sampled tokens and advance
the inputs (`decode_step.record_and_advance`'s torch code, about 20 small kernels, is the reference and
the CPU path).

Launched eagerly once per step, those kernels cost the host about as much as the step's graph replay and
sampler together; in a multi-turn rollout the host, not the device, then set the pace. Tested against the
torch code under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 256


@triton.jit
def _record_and_advance_kernel(tokens_ptr, logprobs_ptr, out_tokens_ptr, out_logprobs_ptr, out_stride, column,
                               input_ids_ptr, positions_ptr, tables_ptr, table_stride, max_column, context_lens_ptr,
                               slots_ptr, limits_ptr, steps_ptr, batch, block_size,
                               ADVANCE: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = rows < batch
    token = tl.load(tokens_ptr + rows, mask=mask, other=0)
    tl.store(out_tokens_ptr + rows * out_stride + column, token, mask=mask)
    tl.store(out_logprobs_ptr + rows * out_stride + column, tl.load(logprobs_ptr + rows, mask=mask, other=0.0),
             mask=mask)
    if ADVANCE:
        tl.store(input_ids_ptr + rows, token, mask=mask)
        position = tl.load(positions_ptr + rows, mask=mask, other=0)
        nxt = position + 1
        valid = nxt < tl.load(limits_ptr + rows, mask=mask, other=0)
        block = tl.load(tables_ptr + rows * table_stride + tl.minimum(nxt // block_size, max_column), mask=mask,
                        other=0)
        slot = block.to(tl.int64) * block_size + nxt % block_size
        tl.store(slots_ptr + rows, tl.where(valid, slot, -1), mask=mask)
        context = tl.load(context_lens_ptr + rows, mask=mask, other=1)
        tl.store(context_lens_ptr + rows, tl.where(valid, nxt + 1, context).to(context.dtype), mask=mask)
        tl.store(positions_ptr + rows, tl.where(valid, nxt, position), mask=mask)
        tl.store(steps_ptr + rows, tl.load(steps_ptr + rows, mask=mask, other=0) + 1, mask=mask)


def record_and_advance(tokens: torch.Tensor, logprobs: torch.Tensor, out_tokens: torch.Tensor,
                       out_logprobs: torch.Tensor, column: int, input_ids: torch.Tensor, positions: torch.Tensor,
                       block_tables: torch.Tensor, context_lens: torch.Tensor, slot_mapping: torch.Tensor,
                       limits: torch.Tensor, steps: torch.Tensor, block_size: int, advance: bool) -> None:
    """`decode_step.record_and_advance` in one launch (same arguments and dtypes; contiguous 1-D rows)."""
    batch = tokens.shape[0]
    if not batch:
        return
    _record_and_advance_kernel[(triton.cdiv(batch, BLOCK),)](
        tokens, logprobs, out_tokens, out_logprobs, out_tokens.stride(0), column, input_ids, positions,
        block_tables, block_tables.stride(0), block_tables.shape[1] - 1, context_lens, slot_mapping, limits, steps,
        batch, block_size, ADVANCE=advance, BLOCK=BLOCK, num_warps=4)
