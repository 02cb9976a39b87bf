"""Triton paged prefill attention vs a per-sequence reference and the torch path.

On CPU the kernel runs under TRITON_INTERPRET=1 in tests/test_triton_on_cpu.py's subprocess (see
test_triton_decode.py for why); on a GPU the `gpu` tests run it natively in bf16.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from hybridrl.rollout.engine.attention import torch_paged
from hybridrl.rollout.engine.attention.metadata import AttentionMetadata
from tests.rollout.engine.helpers import paged_kv_case
from tests.triton_interpreter import INTERPRETED

interpreted = pytest.mark.skipif(not INTERPRETED,
                                 reason="runs in tests/test_triton_on_cpu.py's TRITON_INTERPRET=1 subprocess")


def reference_prefill(q, k_cache, v_cache, meta, scale, sliding_window=None):
    """Sequence by sequence: gather its keys through the block table, causal (+ window) mask, fp32 softmax."""
    page, group = k_cache.shape[1], q.shape[1] // k_cache.shape[2]
    out = torch.empty_like(q)
    starts = meta.query_start.tolist()
    for b, ctx in enumerate(meta.context_lens.tolist()):
        rows = slice(starts[b], starts[b + 1])
        q_len = starts[b + 1] - starts[b]
        tok = torch.arange(ctx)
        where = meta.block_tables[b, tok // page].long(), tok % page
        k = k_cache[where].float().repeat_interleave(group, dim=1)  # (ctx, Hq, D)
        v = v_cache[where].float().repeat_interleave(group, dim=1)
        q_pos = torch.arange(ctx - q_len, ctx)[:, None]
        visible = tok[None, :] <= q_pos
        if sliding_window:
            visible &= tok[None, :] > q_pos - sliding_window
        scores = torch.einsum("qhd,khd->hqk", q[rows].float(), k) * scale
        probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        out[rows] = torch.einsum("hqk,khd->qhd", probs, v).to(q.dtype)
    return out


def make_prefill_case(context_lens, query_lens, num_heads, num_kv_heads, head_dim, page, dtype=torch.float32,
                      device="cpu", seed=0):
    """Random caches, shuffled block tables (wider than needed) and the metadata of both attention paths."""
    gen = torch.Generator().manual_seed(seed)
    k_cache, v_cache, tables = paged_kv_case(context_lens, num_kv_heads, head_dim, page, gen)
    q = torch.randn(sum(query_lens), num_heads, head_dim, generator=gen)
    on = lambda t: t.to(device)  # noqa: E731
    meta = AttentionMetadata(
        is_prefill=True, slot_mapping=on(torch.full((sum(query_lens),), -1)), block_tables=on(tables),
        context_lens=on(torch.tensor(context_lens, dtype=torch.int32)), max_seqlen_q=max(query_lens),
        query_start=on(torch.tensor([0, *itertools.accumulate(query_lens)], dtype=torch.int32)))
    cast = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
    return cast(q), cast(k_cache), cast(v_cache), meta


# (context_lens, query_lens): whole prompts, prefix-cache hits, one-token recomputes, runs over several tiles
RAGGED = ([5, 40, 130, 3], [5, 17, 130, 1])
FOLLOW_UP_TURNS = ([200, 97, 31], [12, 97, 1])


@interpreted
@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim,page", [
    (2, 2, 64, 16), (14, 2, 64, 16), (14, 2, 128, 32), (4, 1, 16, 8),
])
@pytest.mark.parametrize("lens", [RAGGED, FOLLOW_UP_TURNS])
def test_prefill_matches_reference(num_heads, num_kv_heads, head_dim, page, lens):
    from hybridrl.rollout.engine.attention.triton_prefill import paged_prefill_attention

    q, k, v, meta = make_prefill_case(*lens, num_heads, num_kv_heads, head_dim, page)
    scale = head_dim ** -0.5
    out = paged_prefill_attention(q, k, v, meta, scale)
    torch.testing.assert_close(out, reference_prefill(q, k, v, meta, scale), atol=1e-4, rtol=1e-4)


@interpreted
@pytest.mark.parametrize("sliding_window", [1, 8, 40, 64, 1000])
def test_prefill_sliding_window(sliding_window):
    """Windows shorter than a key tile leave some rows without any visible key in a tile."""
    from hybridrl.rollout.engine.attention.triton_prefill import paged_prefill_attention

    q, k, v, meta = make_prefill_case(*RAGGED, 4, 2, 64, 16)
    out = paged_prefill_attention(q, k, v, meta, 0.125, sliding_window)
    torch.testing.assert_close(out, reference_prefill(q, k, v, meta, 0.125, sliding_window), atol=1e-4, rtol=1e-4)


@interpreted
def test_prefill_agrees_with_the_torch_path():
    from hybridrl.rollout.engine.attention.triton_prefill import paged_prefill_attention

    q, k, v, meta = make_prefill_case(*FOLLOW_UP_TURNS, 14, 2, 64, 16)
    torch.testing.assert_close(paged_prefill_attention(q, k, v, meta, 0.125, 40),
                               torch_paged.paged_prefill_attention(q, k, v, meta, 0.125, 40), atol=1e-4, rtol=1e-4)


@interpreted
def test_prefill_half_precision():
    """fp16 stands in for bf16 here: the interpreter's bf16 tl.dot is wrong (triton 3.9); bf16 is a GPU test."""
    from hybridrl.rollout.engine.attention.triton_prefill import paged_prefill_attention

    q, k, v, meta = make_prefill_case(*RAGGED, 14, 2, 64, 16, dtype=torch.float16)
    out = paged_prefill_attention(q, k, v, meta, 0.125)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, reference_prefill(q, k, v, meta, 0.125), atol=2e-3, rtol=2e-3)


def test_query_block_size():
    pytest.importorskip("triton")
    from hybridrl.rollout.engine.attention.triton_prefill import query_block_size

    assert [query_block_size(n) for n in (1, 16, 17, 33, 64, 65, 4096)] == [16, 16, 32, 64, 64, 64, 64]


def test_prefill_rejects_bad_inputs():
    pytest.importorskip("triton")
    from hybridrl.rollout.engine.attention.triton_prefill import paged_prefill_attention

    q, k, v, meta = make_prefill_case(*RAGGED, 4, 2, 64, 16)
    with pytest.raises(ValueError, match="multiple of Hkv"):
        paged_prefill_attention(q[:, :3], k, v, meta, 0.125)
    with pytest.raises(ValueError, match="power of two"):
        paged_prefill_attention(q[..., :48], k[..., :48], v[..., :48], meta, 0.125)
    meta.query_start = None
    with pytest.raises(TypeError, match="query_start"):
        paged_prefill_attention(q, k, v, meta, 0.125)


@pytest.mark.gpu
@pytest.mark.parametrize("sliding_window", [None, 64])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_prefill_bf16_on_gpu(sliding_window, head_dim):
    from hybridrl.rollout.engine.attention.triton_prefill import paged_prefill_attention

    context_lens = [1, 17, 300, 1000, 2048, 600] * 4
    query_lens = [1, 17, 300, 24, 700, 600] * 4
    q, k, v, meta = make_prefill_case(context_lens, query_lens, 14, 2, head_dim, 16, dtype=torch.bfloat16,
                                      device="cuda")
    scale = head_dim ** -0.5
    out = paged_prefill_attention(q, k, v, meta, scale, sliding_window)
    expected = reference_prefill(q.cpu(), k.cpu(), v.cpu(), _on_cpu(meta), scale, sliding_window)
    torch.testing.assert_close(out.float().cpu(), expected.float(), atol=2e-2, rtol=2e-2)


def _on_cpu(meta: AttentionMetadata) -> AttentionMetadata:
    fields = ("slot_mapping", "block_tables", "context_lens", "query_start")
    return AttentionMetadata(True, **{name: getattr(meta, name).cpu() for name in fields},
                             max_seqlen_q=meta.max_seqlen_q)


def test_the_torch_paths_query_grid_from_the_offsets():
    seq_idx, q_idx, query_lens = torch_paged.query_grid(torch.tensor([0, 2, 3, 6], dtype=torch.int32), 6)
    assert seq_idx.tolist() == [0, 0, 1, 2, 2, 2] and q_idx.tolist() == [0, 1, 0, 0, 1, 2]
    assert query_lens.tolist() == [2, 1, 3]
