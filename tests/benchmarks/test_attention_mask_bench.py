"""benchmarks/attention_mask_bench.py: the mask is transformers' causal + left-padding mask, and a --quick CPU run
times every variant."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `benchmarks` is a directory of scripts, not an installed package

from benchmarks import attention_mask_bench  # noqa: E402


def test_padding_mask_is_causal_over_each_rows_tokens():
    mask = attention_mask_bench.padding_mask(rows=6, columns=10, max_pad=4, device=torch.device("cpu"))
    assert mask.shape == (6, 1, 10, 10) and mask.dtype == torch.bool
    for row in mask[:, 0]:
        pad = int((~row[-1]).sum())  # the last query sees every real token
        assert 0 <= pad <= 4 and not row[-1, :pad].any()
        assert torch.equal(row[pad:, pad:], torch.ones(10 - pad, 10 - pad).tril().bool())  # causal on the tokens
        assert row[:pad].all()  # pad queries see everything (no NaN rows)


def test_causal_attention_equals_the_masked_one_on_real_tokens():
    """What aligned rows rely on: a row's real tokens get the same attention either way."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 4) for _ in range(3))
    left = 3
    mask = attention_mask_bench.padding_mask(1, 8, 0, torch.device("cpu"))  # no padding: plain causal
    padded = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(padded, causal)
    shifted = F.scaled_dot_product_attention(q[:, :, left:], k[:, :, left:], v[:, :, left:], is_causal=True)
    col = torch.arange(8)
    pad_mask = ((col[None, :] <= col[:, None]) & (col[None, :] >= left))[None, None]
    masked = F.scaled_dot_product_attention(q, k, v, attn_mask=pad_mask | (col < left)[None, None, :, None])
    torch.testing.assert_close(masked[:, :, left:], shifted)


def test_quick_run_times_every_variant(capsys):
    report = attention_mask_bench.main(["--quick"])
    assert set(report["shapes"]) == {"4x24", "3x40"}
    for shape in report["shapes"].values():
        assert {"mask", "mask_gqa", "causal", "causal_gqa"} <= set(shape)
        assert all(shape[v]["fwd_us"] > 0 and shape[v]["fwd_bwd_us"] > 0 for v in ("mask", "causal_gqa"))
