"""Triton norm / RoPE-and-KV-store / SiLU-and-mul kernels vs the torch layer code they replace on CUDA.

Run in a TRITON_INTERPRET=1 subprocess on CPU (see test_triton_decode.py for why); the kernels must
round where the torch code rounds, so bf16 results agree to within one bf16 ulp."""

from __future__ import annotations

import pytest
import torch

from hybridrl.rollout.engine.layers import RMSNorm, RotaryEmbedding
from tests.triton_interpreter import DEVICES, on_device

DTYPES = [torch.float32, torch.bfloat16]


def close(got, want, dtype):
    # fp32: summation order only; bf16: a couple of ulps (the interpreter truncates where the GPU rounds)
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got, want, **tol)


def same_bits_on_gpu(got, want, dtype, device):
    """Elementwise kernels without a sum, in 16 bits: on a GPU they must round exactly where the torch code does (an
    FMA that skips a product's rounding fails here). The interpreter's fp32 -> bf16 cast truncates, so CPU gets
    `close`; so does fp32, where Triton's exp differs from CUDA's expf in the last bits."""
    if device == "cuda" and dtype != torch.float32:
        assert torch.equal(got, want), f"{(got != want).float().mean().item():.1%} of the elements differ"
    else:
        close(got, want, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_with_and_without_residual(dtype, device, monkeypatch):
    from hybridrl.rollout.engine import fused_ops, layers

    device = on_device(device)
    monkeypatch.setattr(layers, "USE_FUSED_OPS", False)  # `norm(...)` below is the torch reference
    torch.manual_seed(0)
    norm = RMSNorm(96, 1e-6).to(device, dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(96) + 0.5)
    x, residual = torch.randn(5, 96, dtype=dtype, device=device) * 3, torch.randn(5, 96, dtype=dtype, device=device)
    close(fused_ops.rms_norm(x, norm.weight, norm.eps), norm(x), dtype)
    out, res = fused_ops.rms_norm(x, norm.weight, norm.eps, residual)
    want_out, want_res = norm(x, residual)
    # one rounded add: exact, except that the interpreter's fp32 -> bf16 cast truncates where GPUs round
    exact = dtype == torch.float32 or device == "cuda"
    assert torch.equal(res, want_res) if exact else close(res, want_res, dtype) is None
    close(out, want_out, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_on_an_fp32_residual_stream_with_bf16_weights(device, monkeypatch):
    """The engine's fp32 residual stream (models/llama.py `residual_dtype`): a bf16 sub-layer output added to
    the fp32 stream gives an fp32 sum and a bf16 normalised output; layer 0 normalises the fp32 stream alone."""
    from hybridrl.rollout.engine import fused_ops, layers

    device = on_device(device)
    monkeypatch.setattr(layers, "USE_FUSED_OPS", False)
    torch.manual_seed(0)
    norm = RMSNorm(96, 1e-6).to(device, torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(96) + 0.5)
    stream = torch.randn(5, 96, device=device) * 3
    sublayer = torch.randn(5, 96, device=device).to(torch.bfloat16)
    out = fused_ops.rms_norm(stream, norm.weight, norm.eps)
    assert out.dtype == torch.bfloat16
    close(out, norm(stream), torch.bfloat16)
    out, res = fused_ops.rms_norm(sublayer, norm.weight, norm.eps, stream)
    want_out, want_res = norm(sublayer, stream)
    assert out.dtype == want_out.dtype == torch.bfloat16 and res.dtype == want_res.dtype == torch.float32
    torch.testing.assert_close(res, want_res, rtol=0, atol=0)  # an fp32 sum of the same two values
    close(out, want_out, torch.bfloat16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(dtype, device):
    from hybridrl.rollout.engine import fused_ops

    device = on_device(device)
    torch.manual_seed(1)
    gate_up = (torch.randn(3, 3000, dtype=dtype) * 4).to(device)  # 1500: not a multiple of the kernel block
    gate, up = gate_up.chunk(2, dim=-1)
    same_bits_on_gpu(fused_ops.silu_and_mul(gate_up), torch.nn.functional.silu(gate) * up, dtype, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim,rot_dim", [(64, 64), (96, 48)])  # full and partial (Phi-3 style) rotary
def test_rotary_store_kv_matches_rope_then_cache_store(dtype, head_dim, rot_dim, device, monkeypatch):
    """q/k/v as strided views of one qkv projection, GQA (7 query heads, 2 KV heads), a padding row (slot
    -1): q rotated in place, rotated k and raw v in their cache slots, every other slot and v untouched."""
    from hybridrl.rollout.engine import fused_ops, layers
    from hybridrl.rollout.engine.attention.torch_paged import store_kv_cache

    device = on_device(device)
    monkeypatch.setattr(layers, "USE_FUSED_OPS", False)  # `rope(...)` below is the torch reference
    torch.manual_seed(2)
    inv_freq = 1.0 / 10000 ** (torch.arange(0, rot_dim, 2).float() / rot_dim)
    rope = RotaryEmbedding(inv_freq, 1.0, 64).to(device, dtype)
    n, hq, hk = 4, 7, 2
    qkv = torch.randn(n, (hq + 2 * hk) * head_dim, dtype=dtype).to(device)
    q, k, v = (part.view(n, -1, head_dim) for part in qkv.split([hq * head_dim, hk * head_dim, hk * head_dim], -1))
    positions = torch.tensor([0, 5, 17, 63], device=device)
    slots = torch.tensor([3, -1, 40, 12], device=device)
    k_cache = torch.randn(4, 16, hk, head_dim, dtype=dtype).to(device)  # (blocks, block_size, Hkv, D)
    v_cache = torch.randn_like(k_cache)
    want_k_cache, want_v_cache = k_cache.clone(), v_cache.clone()
    want_q, want_k = rope(positions, q.clone(), k.clone())
    store_kv_cache(want_k, v, want_k_cache, want_v_cache, slots)
    v_before, k_before = v.clone(), k.clone()

    got = fused_ops.rotary_store_kv(q, k, v, positions, rope.cos, rope.sin, rope.rot_dim, k_cache, v_cache, slots)
    assert got.data_ptr() == q.data_ptr()
    same_bits_on_gpu(q, want_q, dtype, device)
    same_bits_on_gpu(k_cache, want_k_cache, dtype, device)
    assert torch.equal(v_cache, want_v_cache)  # v is copied, not computed
    assert torch.equal(v, v_before) and torch.equal(k, k_before)  # k rotated into the cache only


@pytest.mark.gpu
def test_engine_log_probs_with_and_without_fused_ops_agree_on_cuda(monkeypatch):
    """The same sampled tokens scored by a bf16 engine with and without the fused kernels: log-probs of
    the forced tokens agree to bf16 noise (greedy paths of a random model would part at near-ties)."""
    from tests.rollout.engine.helpers import PROMPTS, make_model

    from hybridrl.rollout.base import SamplingParams
    from hybridrl.rollout.engine import layers
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    model = make_model("qwen2", hidden_size=128, num_heads=4, num_kv_heads=2, vocab_size=512, scale=1.0)
    params = SamplingParams(n=2, max_new_tokens=24, ignore_eos=True, seed=3)
    kwargs = dict(device="cuda", dtype=torch.bfloat16, num_kv_blocks=128, block_size=16, max_num_seqs=16)
    fused = LLMEngine(model, **kwargs).generate(PROMPTS, params)
    monkeypatch.setattr(layers, "USE_FUSED_OPS", False)
    plain = LLMEngine(model, **kwargs).generate(PROMPTS, params)
    same = [(a, b) for a, b, ta, tb in zip(fused.log_probs, plain.log_probs, fused.token_ids, plain.token_ids)
            if ta == tb]
    assert len(same) >= len(plain.token_ids) // 2  # seeded sampling: most rows take the same path
    diffs = torch.tensor([x - y for a, b in same for x, y in zip(a, b)]).abs()
    assert diffs.mean() < 0.02 and diffs.max() < 0.2
