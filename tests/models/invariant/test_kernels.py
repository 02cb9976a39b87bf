"""The batch-invariant kernels: each row's result independent of what shares the launch, and equal to the
plain operation up to rounding.

Run natively on a GPU (gpu marker, bf16) and in the TRITON_INTERPRET=1 subprocess on CPU (fp16: the interpreter's
bf16 `tl.dot` is broken; tests/triton_interpreter.py). On CPU the interpreter computes a `tl.dot` tile with numpy,
whose BLAS rounds a column by where it sits in the tile, so the column-placement test is GPU-only."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.triton_interpreter import DEVICES, on_device


def dtype_on(device: str) -> torch.dtype:
    return torch.bfloat16 if device == "cuda" else torch.float16


@pytest.mark.parametrize("device", DEVICES)
def test_linear_rows_do_not_depend_on_the_batch(device):
    from hybridrl.models.invariant.matmul import linear

    device = on_device(device)
    dtype = dtype_on(device)
    torch.manual_seed(0)
    rows = 3000 if device == "cuda" else 300  # on the GPU, past SMALL_M: other tiles than a few rows get
    x = torch.randn(rows, 96, device=device, dtype=dtype)
    weight, bias = torch.randn(80, 96, device=device, dtype=dtype) / 10, torch.randn(80, device=device, dtype=dtype)
    full = linear(x, weight, bias)
    assert torch.equal(linear(x[:1], weight, bias), full[:1])
    assert torch.equal(linear(x[130:137], weight, bias), full[130:137])
    assert torch.equal(linear(x.view(3, rows // 3, 96), weight, bias), full.view(3, rows // 3, 80))
    torch.testing.assert_close(full.float(), F.linear(x.float(), weight.float(), bias.float()), atol=0.05, rtol=0.02)


@pytest.mark.gpu
def test_fused_projection_columns_equal_the_separate_projections():
    """The engine's fused q/k/v (one weight) against the trainer's q, k and v projections (three weights)."""
    from hybridrl.models.invariant.matmul import linear

    on_device("cuda")
    torch.manual_seed(0)
    x = torch.randn(512, 896, device="cuda", dtype=torch.bfloat16)
    parts = [torch.randn(n, 896, device="cuda", dtype=torch.bfloat16) / 30 for n in (896, 128, 128)]
    biases = [torch.randn(w.shape[0], device="cuda", dtype=torch.bfloat16) for w in parts]
    fused = linear(x, torch.cat(parts), torch.cat(biases))
    separate = torch.cat([linear(x[:7], w, b) for w, b in zip(parts, biases)], dim=-1)
    assert torch.equal(fused[:7], separate)


@pytest.mark.gpu
def test_the_tma_kernel_of_large_products_gives_the_small_products_bits(monkeypatch):
    """A micro-batch's product goes to the TMA kernel (Hopper), a decode step's few rows to the other: same bits."""
    from hybridrl.models.invariant import matmul

    on_device("cuda")
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the TMA kernel runs on Hopper or later")
    torch.manual_seed(0)
    x = torch.randn(3001, 1024, device="cuda", dtype=torch.bfloat16)  # a tail tile of rows and of columns
    weight = torch.randn(4104, 1024, device="cuda", dtype=torch.bfloat16) / 30
    bias = torch.randn(4104, device="cuda", dtype=torch.bfloat16)
    assert matmul._takes_tma(x, weight, torch.empty(3001, 4104, device="cuda", dtype=torch.bfloat16))
    full = matmul.linear(x, weight, bias)
    assert torch.equal(matmul.linear(x[:5], weight, bias), full[:5])
    monkeypatch.setattr(matmul, "TMA_MIN_FLOP", 1 << 62)
    assert torch.equal(matmul.linear(x, weight, bias), full)


@pytest.mark.parametrize("device", DEVICES)
def test_agreeing_linear_gives_the_kernels_bits_and_records_each_layout(device):
    """The engine's linear: cuBLAS (CPU: PyTorch's own GEMM) where it gives the kernel's bits, else the kernel;
    either way the kernel's bits. The check draws its probe from its own generator."""
    from hybridrl.models.invariant import matmul

    device = on_device(device)
    dtype = dtype_on(device)
    torch.manual_seed(0)
    weight, bias = torch.randn(80, 96, device=device, dtype=dtype) / 10, torch.randn(80, device=device, dtype=dtype)
    for rows in (7, 64):
        x = torch.randn(rows, 96, device=device, dtype=dtype)
        rng = torch.cuda.get_rng_state() if device == "cuda" else torch.get_rng_state()
        assert torch.equal(matmul.agreeing_linear(x, weight, bias), matmul.linear_forward(x, weight, bias))
        assert torch.equal(rng, torch.cuda.get_rng_state() if device == "cuda" else torch.get_rng_state())
        assert f"{rows} x 96 -> 80 + bias" in matmul.cublas_agreement()
    many = torch.randn(matmul.CUBLAS_CHECK_MAX_ROWS + 1, 96, device=device, dtype=dtype)
    assert torch.equal(matmul.agreeing_linear(many, weight), matmul.linear_forward(many, weight))
    assert f"{len(many)} x 96 -> 80" not in matmul.cublas_agreement()  # more rows: the kernel, unchecked


@pytest.mark.parametrize("device", DEVICES)
def test_the_agreement_probe_tells_two_summation_orders_apart(device):
    """Even a one-row product: the probe's rounding differs between the kernel's order and a split-K sum of the
    same terms (two halves of K summed apart, then added), where random rows can round alike."""
    from hybridrl.models.invariant import matmul

    device = on_device(device)
    dtype = dtype_on(device)
    x = torch.empty(1, 896, device=device, dtype=dtype)
    w = torch.empty(128, 896, device=device, dtype=dtype)
    matmul.fill_probe(x, w, torch.Generator(device).manual_seed(1))
    halves = (matmul.linear_forward(x[:, :448].float(), w[:, :448].float())
              + matmul.linear_forward(x[:, 448:].float(), w[:, 448:].float())).to(dtype)
    ordered = matmul.linear_forward(x, w)
    assert (halves != ordered).float().mean() > 0.4
    assert torch.equal(matmul.linear_forward(x.repeat(9, 1), w)[:1], ordered)  # one order: the same bits


@pytest.mark.gpu
def test_agreeing_linear_runs_the_kernel_for_a_layout_first_seen_in_a_graph_capture():
    from hybridrl.models.invariant import matmul

    on_device("cuda")
    torch.manual_seed(0)
    x = torch.randn(33, 256, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16) / 16
    matmul.linear_forward(x, weight)  # compiles the kernel outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = matmul.agreeing_linear(x, weight)
    graph.replay()
    assert torch.equal(out, matmul.linear_forward(x, weight))
    assert "33 x 256 -> 512" not in matmul.cublas_agreement()


@pytest.mark.parametrize("device", DEVICES)
def test_linear_gradients_are_the_plain_linear_gradients(device):
    from hybridrl.models.invariant.matmul import linear

    device = on_device(device)
    torch.manual_seed(0)
    x = torch.randn(4, 9, 32, device=device, requires_grad=True)
    weight = torch.randn(24, 32, device=device, requires_grad=True)
    bias = torch.randn(24, device=device, requires_grad=True)
    grad = torch.randn(4, 9, 24, device=device)
    want = torch.autograd.grad(F.linear(x, weight, bias), (x, weight, bias), grad)
    got = torch.autograd.grad(linear(x, weight, bias), (x, weight, bias), grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, "16-bit"])
def test_rms_norm_gradients_are_the_hf_norms(device, dtype):
    """The trainer's RMSNorm in this mode: the engine kernel's value, the gradient of HF's formula (fp32 for the
    fp32 residual stream, 16-bit otherwise), for the input and the weight."""
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    from hybridrl.models.invariant.hf import _rms_norm_forward

    device = on_device(device)
    dtype = dtype_on(device) if dtype == "16-bit" else dtype
    torch.manual_seed(0)
    norm = Qwen2RMSNorm(48, eps=1e-6).to(device)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(48) * 0.5 + 1)
    x = (torch.randn(3, 5, 48, device=device) * 3).to(dtype).requires_grad_()
    grad = torch.randn(3, 5, 48, device=device)
    plain = norm.forward(x)
    want = torch.autograd.grad(plain, (x, norm.weight), grad.to(plain.dtype))
    value = _rms_norm_forward(norm, x)
    got = torch.autograd.grad(value, (x, norm.weight), grad.to(value.dtype))
    torch.testing.assert_close(value.float(), plain.float(), atol=1e-2, rtol=1e-2)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w.float(), atol=tol, rtol=tol)


def _paged(k: torch.Tensor, v: torch.Tensor, page: int, order: list[int]):
    """Row 0 of k/v (1, Hkv, T, D) written into a paged cache whose pages come in `order`."""
    _, num_kv, width, dim = k.shape
    k_cache = torch.zeros(len(order) + 2, page, num_kv, dim, dtype=k.dtype, device=k.device)
    v_cache = torch.zeros_like(k_cache)
    table = torch.tensor([order], dtype=torch.int32, device=k.device)
    for t in range(width):
        k_cache[order[t // page], t % page] = k[0, :, t]
        v_cache[order[t // page], t % page] = v[0, :, t]
    return k_cache, v_cache, table


@pytest.mark.parametrize("device,window", [("cpu", 40), pytest.param("cuda", None, marks=pytest.mark.gpu),
                                           pytest.param("cuda", 40, marks=pytest.mark.gpu)])
def test_attention_is_the_same_in_rows_prefill_and_decode(device, window):
    """One query token's output: in a dense trainer row (left-padded), in a paged prefill and in a paged decode
    step, bit for bit; and the attention itself (SDPA, the causal or sliding-window mask)."""
    from hybridrl.models.invariant.attention import dense_causal_attention, paged_attention

    device = on_device(device)
    dtype = dtype_on(device)
    torch.manual_seed(0)
    heads, kv_heads, width, dim, pad = (6, 2, 150, 64, 7) if device == "cuda" else (3, 1, 150, 32, 7)
    q = torch.randn(1, heads, width, dim, device=device, dtype=dtype)
    k, v = (torch.randn(1, kv_heads, width, dim, device=device, dtype=dtype) for _ in range(2))
    rows = dense_causal_attention(q, k, v, torch.zeros(1, dtype=torch.int32, device=device), 0.125, window)
    padded = [torch.cat([torch.randn(1, t.shape[1], pad, dim, device=device, dtype=dtype), t], dim=2) for t in (q, k, v)]
    shifted = dense_causal_attention(*padded, torch.tensor([pad], dtype=torch.int32, device=device), 0.125, window)
    assert torch.equal(shifted[:, pad:], rows)
    assert not shifted[:, :pad].any()
    k_cache, v_cache, table = _paged(k, v, 16, [3, 0, 5, 1, 8, 2, 6, 4, 9, 7])
    context = torch.tensor([width], dtype=torch.int32, device=device)
    tokens = q[0].transpose(0, 1).contiguous()  # (T, Hq, D)
    prefill = paged_attention(tokens[100:], k_cache, v_cache, table, context, 0.125, window,
                              query_start=torch.tensor([0, 50], dtype=torch.int32, device=device), max_seqlen_q=50)
    assert torch.equal(prefill, rows[0, 100:])
    decode = paged_attention(tokens[-1:], k_cache, v_cache, table, context, 0.125, window)
    assert torch.equal(decode[0], rows[0, -1])
    allowed = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    if window:
        allowed &= ~torch.ones_like(allowed).tril(-window)
    group = heads // kv_heads
    want = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1),
                                          attn_mask=allowed, scale=0.125).transpose(1, 2)
    torch.testing.assert_close(rows.float(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_label_log_probs_are_log_softmax_rows_whatever_shares_the_launch(device):
    from hybridrl.models.invariant.log_probs import label_log_probs

    device = on_device(device)
    dtype = dtype_on(device)
    torch.manual_seed(0)
    logits = (torch.randn(7, 9000, device=device) * 4).to(dtype)
    labels = torch.randint(0, 9000, (7,), device=device)
    want = torch.log_softmax(logits.float() / 0.7, -1).gather(1, labels[:, None])[:, 0]
    full = label_log_probs(logits, labels, 0.7)
    torch.testing.assert_close(full, want, atol=1e-5, rtol=1e-5)
    assert torch.equal(label_log_probs(logits[2:4], labels[2:4], 0.7), full[2:4])
    temps = torch.tensor([1.0, 0.7, 0.5, 1.0, 2.0, 0.7, 1.0], device=device)
    per_row = label_log_probs(logits, labels, temps)
    assert torch.equal(per_row[1], full[1])
    torch.testing.assert_close(per_row, torch.log_softmax(logits.float() / temps[:, None], -1).gather(
        1, labels[:, None])[:, 0], atol=1e-5, rtol=1e-5)
    with pytest.raises(TypeError, match="values only"):
        label_log_probs(logits.clone().requires_grad_(), labels, 0.7)


def test_the_kernels_refuse_a_cpu_tensor_outside_the_interpreter():
    from tests.triton_interpreter import INTERPRETED

    if INTERPRETED:
        pytest.skip("the interpreter runs the kernels on CPU")
    pytest.importorskip("triton")
    from hybridrl.models.invariant.matmul import linear

    with pytest.raises(ValueError, match="batch_invariant=true runs Triton kernels on CUDA"):
        linear(torch.randn(2, 4), torch.randn(3, 4))
