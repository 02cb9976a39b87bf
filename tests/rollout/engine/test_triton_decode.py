"""Triton paged decode attention and KV store vs a pure-torch reference.

On CPU the kernels run under TRITON_INTERPRET=1, which must be set before triton is imported, so
`tests/test_triton_on_cpu.py` re-runs this file in a subprocess with it set (nothing leaks into this
process); the `interpreted` tests below only run inside that subprocess.
"""

from __future__ import annotations

import pytest
import torch

from tests.rollout.engine.helpers import paged_kv_case
from tests.triton_interpreter import INTERPRETED

interpreted = pytest.mark.skipif(not INTERPRETED,
                                 reason="runs in tests/test_triton_on_cpu.py's TRITON_INTERPRET=1 subprocess")


def reference_decode(q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window=None):
    """Gather each sequence's tokens through its block table, repeat KV heads, softmax in fp32."""
    page = k_cache.shape[1]
    group = q.shape[1] // k_cache.shape[2]
    out = torch.empty_like(q)
    for b, ctx in enumerate(context_lens.tolist()):
        first = max(0, ctx - sliding_window) if sliding_window else 0
        tok = torch.arange(first, ctx, device=block_tables.device)
        rows = block_tables[b, tok // page].long(), tok % page
        k = k_cache[rows].float().repeat_interleave(group, dim=1)  # (T, Hq, D)
        v = v_cache[rows].float().repeat_interleave(group, dim=1)
        probs = torch.softmax(torch.einsum("hd,thd->ht", q[b].float(), k) * scale, dim=-1)
        out[b] = torch.einsum("ht,thd->hd", probs, v).to(q.dtype)
    return out


def make_case(context_lens, num_heads, num_kv_heads, head_dim, page, dtype=torch.float32, device="cpu",
              extra_blocks=3, seed=0):
    """Random caches and shuffled, zero-padded block tables for ragged `context_lens`."""
    gen = torch.Generator().manual_seed(seed)
    k_cache, v_cache, tables = paged_kv_case(context_lens, num_kv_heads, head_dim, page, gen, extra_blocks)
    q = torch.randn(len(context_lens), num_heads, head_dim, generator=gen)
    lens = torch.tensor(context_lens, dtype=torch.int32)
    cast = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
    return cast(q), cast(k_cache), cast(v_cache), tables.to(device), lens.to(device)


@interpreted
@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim,page", [
    (2, 2, 64, 16), (4, 2, 64, 16), (14, 2, 64, 16),  # GQA ratios 1, 2, 7 (Qwen2.5-0.5B: 14 / 2)
    (14, 2, 128, 32), (7, 1, 64, 32), (4, 1, 128, 16),
])
def test_decode_matches_reference(num_heads, num_kv_heads, head_dim, page):
    from hybridrl.rollout.engine.attention.triton_decode import paged_decode_attention

    case = make_case([1, 17, 100], num_heads, num_kv_heads, head_dim, page)
    scale = head_dim ** -0.5
    out = paged_decode_attention(*case, scale)
    torch.testing.assert_close(out, reference_decode(*case, scale), atol=1e-4, rtol=1e-4)


@interpreted
@pytest.mark.parametrize("num_splits,sliding_window", [(2, None), (3, None), (3, 8), (2, 40)])
def test_split_k_and_sliding_window(num_splits, sliding_window):
    from hybridrl.rollout.engine.attention.triton_decode import paged_decode_attention

    # Width 16 blocks of 16 = 256 tokens: some splits are empty for short (or windowed) contexts.
    case = make_case([1, 17, 100, 200], 14, 2, 64, 16, extra_blocks=3)
    out = paged_decode_attention(*case, 0.125, sliding_window, num_splits=num_splits)
    torch.testing.assert_close(out, reference_decode(*case, 0.125, sliding_window), atol=1e-4, rtol=1e-4)


@interpreted
@pytest.mark.parametrize("num_splits,sliding_window", [(1, None), (4, 64)])
def test_decode_half_precision(num_splits, sliding_window):
    """fp16 stands in for bf16 here: the interpreter's bf16 tl.dot is wrong (triton 3.9); bf16 is a GPU test."""
    from hybridrl.rollout.engine.attention.triton_decode import paged_decode_attention

    case = make_case([1, 17, 100, 356], 14, 2, 64, 16, dtype=torch.float16)
    out = paged_decode_attention(*case, 0.125, sliding_window, num_splits=num_splits)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, reference_decode(*case, 0.125, sliding_window), atol=2e-3, rtol=2e-3)


@interpreted
def test_default_split_plan_with_long_table(monkeypatch):
    """Small batch, 40 blocks of 16 = 640 possible tokens: on an H200 the plan is 3 partitions of 256."""
    from hybridrl.rollout.engine.attention import triton_decode
    from hybridrl.rollout.engine.attention.triton_decode import paged_decode_attention

    monkeypatch.setattr(triton_decode, "_num_sms", lambda device: 132)
    assert triton_decode.plan_splits(3, 2, 640, 132) == (3, 256)
    case = make_case([1, 300, 600], 4, 2, 64, 16, extra_blocks=2)
    out = paged_decode_attention(*case, 0.125, 100)
    torch.testing.assert_close(out, reference_decode(*case, 0.125, 100), atol=1e-4, rtol=1e-4)


@interpreted
@pytest.mark.parametrize("sliding_window", [1, 8, 40, 1000])
def test_sliding_window_unsplit(sliding_window):
    from hybridrl.rollout.engine.attention.triton_decode import paged_decode_attention

    case = make_case([1, 17, 100], 4, 2, 64, 32)
    out = paged_decode_attention(*case, 0.125, sliding_window, num_splits=1)
    torch.testing.assert_close(out, reference_decode(*case, 0.125, sliding_window), atol=1e-4, rtol=1e-4)


@interpreted
def test_store_kv_cache_skips_negative_slots():
    from hybridrl.rollout.engine.attention.triton_decode import store_kv_cache

    k_cache, v_cache = torch.zeros(4, 16, 2, 64), torch.zeros(4, 16, 2, 64)
    k, v = torch.randn(5, 2, 64), torch.randn(5, 2, 64)
    slots = torch.tensor([3, -1, 17, 63, -1], dtype=torch.int64)
    store_kv_cache(k, v, k_cache, v_cache, slots)
    flat_k, flat_v = k_cache.view(-1, 2, 64), v_cache.view(-1, 2, 64)
    written = slots >= 0
    torch.testing.assert_close(flat_k[slots[written]], k[written])
    torch.testing.assert_close(flat_v[slots[written]], v[written])
    untouched = torch.ones(64, dtype=torch.bool)
    untouched[slots[written]] = False
    assert flat_k[untouched].abs().sum() == 0 and flat_v[untouched].abs().sum() == 0


@interpreted
def test_store_then_decode_round_trip():
    """Store a sequence's K/V token by token through a block table, then attend over it."""
    from hybridrl.rollout.engine.attention.triton_decode import paged_decode_attention, store_kv_cache

    k_cache, v_cache = torch.zeros(6, 16, 2, 64), torch.zeros(6, 16, 2, 64)
    table = torch.tensor([[4, 1, 5]], dtype=torch.int32)
    k, v = torch.randn(40, 2, 64), torch.randn(40, 2, 64)
    pos = torch.arange(40)
    store_kv_cache(k, v, k_cache, v_cache, (table[0, pos // 16].long() * 16 + pos % 16))
    q = torch.randn(1, 4, 64)
    out = paged_decode_attention(q, k_cache, v_cache, table, torch.tensor([40], dtype=torch.int32), 0.125)
    probs = torch.softmax(torch.einsum("hd,thd->ht", q[0], k.repeat_interleave(2, 1)) * 0.125, -1)
    torch.testing.assert_close(out[0], torch.einsum("ht,thd->hd", probs, v.repeat_interleave(2, 1)),
                               atol=1e-4, rtol=1e-4)


def test_split_plan():
    pytest.importorskip("triton")
    from hybridrl.rollout.engine.attention.triton_decode import plan_splits

    assert plan_splits(batch=512, num_kv_heads=2, max_tokens=32768, num_sms=132) == (1, 32768)  # enough programs
    assert plan_splits(batch=1, num_kv_heads=2, max_tokens=200, num_sms=132) == (1, 256)  # context too short
    assert plan_splits(batch=16, num_kv_heads=2, max_tokens=4096, num_sms=132) == (16, 256)
    assert plan_splits(batch=1, num_kv_heads=2, max_tokens=1000, num_sms=132) == (4, 256)  # last one partial
    assert plan_splits(batch=1, num_kv_heads=2, max_tokens=65536, num_sms=132) == (128, 512)  # <= MAX_SPLITS


def test_rejects_bad_inputs():
    pytest.importorskip("triton")
    from hybridrl.rollout.engine.attention.triton_decode import paged_decode_attention

    q, k, v, tables, lens = make_case([5], 4, 2, 64, 16)
    with pytest.raises(TypeError, match="int32"):
        paged_decode_attention(q, k, v, tables.long(), lens, 0.125)
    with pytest.raises(ValueError, match="multiple of Hkv"):
        paged_decode_attention(q[:, :3], k, v, tables, lens, 0.125)
    with pytest.raises(ValueError, match="power"):
        paged_decode_attention(q[..., :48], k[..., :48], v[..., :48], tables, lens, 0.125)


@pytest.mark.gpu
@pytest.mark.parametrize("num_splits", [None, 1, 4])
@pytest.mark.parametrize("sliding_window", [None, 64])
def test_decode_bf16_on_gpu(num_splits, sliding_window):
    from hybridrl.rollout.engine.attention.triton_decode import paged_decode_attention

    lens = [1, 17, 100, 356, 1000] * 4
    case = make_case(lens, 14, 2, 64, 16, dtype=torch.bfloat16, device="cuda")
    out = paged_decode_attention(*case, 0.125, sliding_window, num_splits=num_splits)
    torch.testing.assert_close(out.float(), reference_decode(*case, 0.125, sliding_window).float(),
                               atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_store_kv_cache_bf16_on_gpu():
    from hybridrl.rollout.engine.attention.triton_decode import store_kv_cache

    k_cache = torch.zeros(8, 16, 2, 128, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.zeros_like(k_cache)
    k = torch.randn(3, 2, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    slots = torch.tensor([100, -1, 5], device="cuda")
    store_kv_cache(k, v, k_cache, v_cache, slots)
    assert torch.equal(k_cache.view(-1, 2, 128)[slots[[0, 2]]], k[[0, 2]])
    assert torch.equal(v_cache.view(-1, 2, 128)[slots[[0, 2]]], v[[0, 2]])
    assert k_cache.view(-1, 2, 128).abs().sum(dim=(1, 2)).count_nonzero() == 2


@interpreted
def test_engine_with_triton_kernels_matches_torch_backend():
    """The engine's layers calling the Triton kernels (store, prefill, decode) sample what the torch backend
    samples; n=2 makes the second sample of each prompt a prefix-cache hit (a one-token prefill)."""
    from tests.rollout.engine.helpers import PROMPTS, make_model

    from hybridrl.rollout.base import SamplingParams
    from hybridrl.rollout.engine.attention import AttentionBackend, triton_decode, triton_prefill
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    model = make_model("qwen2", hidden_size=64, num_heads=4, num_kv_heads=2, num_layers=1)  # head_dim 16
    params = SamplingParams(n=2, max_new_tokens=4, temperature=1.0, seed=3)
    expected = LLMEngine(model, num_kv_blocks=64, block_size=4).generate(PROMPTS, params)
    engine = LLMEngine(model, num_kv_blocks=64, block_size=4)
    backend = AttentionBackend("triton", triton_decode.store_kv_cache, triton_decode.paged_decode_attention,
                               triton_prefill.paged_prefill_attention)
    for layer in engine.runner.layers:
        layer.backend = backend
    out = engine.generate(PROMPTS, params)
    assert out.token_ids == expected.token_ids
    for got, want in zip(out.log_probs, expected.log_probs):
        assert got == pytest.approx(want, abs=1e-4)
