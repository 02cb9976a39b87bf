"""Batch-invariant token log-probs: log softmax(logits / temperature)[label], one row per program.

The engine records the log-prob of each token it samples; the trainer recomputes it from its own forward.
Both call this kernel on the LM head's logits (16-bit, from the batch-invariant linear): each row is read in
VOCAB_BLOCK tiles in order, with a running max and sum in fp32, so the value depends on the row alone, not on how
many rows share the launch. The trainer's gradient comes from algorithms/fused_logprob.py, whose forward takes
its log-probs from here.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hybridrl.models.invariant import check_device, needs_grad

VOCAB_BLOCK = 4096


@triton.jit
def _label_log_probs_kernel(logits_ptr, labels_ptr, temps_ptr, out_ptr, vocab, stride_row,
                            BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * stride_row
    inv_temp = 1.0 / tl.load(temps_ptr + row)
    offs = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, vocab, BLOCK):
        x = tl.load(base + start + offs, mask=start + offs < vocab, other=float("-inf")).to(tl.float32) * inv_temp
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    row_max = tl.max(m, 0)
    total = tl.sum(s * tl.exp(m - row_max), 0)
    label = tl.load(labels_ptr + row)
    picked = tl.load(base + label).to(tl.float32) * inv_temp
    tl.store(out_ptr + row, picked - row_max - tl.log(total))


def label_log_probs(logits: torch.Tensor, labels: torch.Tensor, temperature: float | torch.Tensor = 1.0
                    ) -> torch.Tensor:
    """log softmax(logits / temperature)[labels]: logits (N, V), labels (N,) int, temperature a float or fp32 (N,)
    -> fp32 (N,), batch-invariant; a value, not differentiable (the trainer takes the gradient from
    algorithms/fused_logprob.py's kernels)."""
    if needs_grad(logits):
        raise TypeError("label_log_probs gives values only; the trainer's differentiable log-probs are "
                        "algorithms.logprob.token_stats_from_hidden(..., batch_invariant=True)")
    check_device(logits)
    rows, vocab = logits.shape
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    temps = temperature if isinstance(temperature, torch.Tensor) else torch.full(
        (rows,), float(temperature), dtype=torch.float32, device=logits.device)
    out = torch.empty(rows, dtype=torch.float32, device=logits.device)
    if rows:
        _label_log_probs_kernel[(rows,)](logits, labels, temps.float(), out, vocab, logits.stride(0),
                                         BLOCK=VOCAB_BLOCK, num_warps=8)
    return out
