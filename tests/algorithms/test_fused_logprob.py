"""The Triton log-prob path vs the torch path: values and gradients (hidden, head weight, bias), and Σπ².

Run in a TRITON_INTERPRET=1 subprocess on CPU (kernels on CPU tensors), natively on CUDA (gpu marker)."""

from __future__ import annotations

import pytest
import torch

from hybridrl.algorithms.logprob import logprobs_and_entropy_from_hidden, token_stats_from_hidden
from tests.triton_interpreter import DEVICES, on_device


def case(device, vocab=5000, rows=37, hidden=24, bias=False, dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    h = (torch.randn(rows, hidden, generator=gen) * 2).to(device, dtype).requires_grad_()
    w = (torch.randn(vocab, hidden, generator=gen) / hidden ** 0.5).to(device, dtype).requires_grad_()
    b = (torch.randn(vocab, generator=gen) * 0.1).to(device, dtype).requires_grad_() if bias else None
    labels = torch.randint(0, vocab, (rows,), generator=gen).to(device)
    return h, w, b, labels


def run(fused, h, w, b, labels, temperature, entropy_weight, chunk):
    for t in (h, w, b):
        if t is not None:
            t.grad = None
    lp, ent = logprobs_and_entropy_from_hidden(h, w, labels, temperature, chunk_size=chunk, compute_entropy=True,
                                               lm_head_bias=b, fused=fused)
    (lp * torch.linspace(-1, 1, lp.numel(), device=lp.device)).sum().add(entropy_weight * ent.sum()).backward()
    return lp.detach(), ent.detach(), [t.grad.clone() for t in (h, w, b) if t is not None]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("temperature,entropy_weight,bias,chunk", [
    (1.0, 0.0, False, 16), (0.7, 0.0, True, 64), (1.3, 0.5, False, 8), (1.0, -0.2, True, 1000)])
def test_fused_matches_torch_values_and_gradients(device, temperature, entropy_weight, bias, chunk):
    h, w, b, labels = case(on_device(device), bias=bias)
    want = run(False, h, w, b, labels, temperature, entropy_weight, chunk)
    got = run(True, h, w, b, labels, temperature, entropy_weight, chunk)
    torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[1], want[1], atol=1e-4, rtol=1e-4)
    for g, w_ in zip(got[2], want[2]):
        torch.testing.assert_close(g, w_, atol=1e-4, rtol=1e-3)


@pytest.mark.gpu
def test_fused_bf16_under_autocast_on_cuda_matches_torch():
    """fp32 master weights, bf16 compute (the actor's mixed precision): the fused path's log-probs and
    gradients agree with the torch path to bf16 noise, and gradients keep the parameters' dtypes."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    h, w, _, labels = case("cuda", vocab=151936, rows=300, hidden=64)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        want = run(False, h, w, None, labels, 1.0, 0.0, 128)
        got = run(True, h, w, None, labels, 1.0, 0.0, 128)
    torch.testing.assert_close(got[0], want[0], atol=2e-2, rtol=0)
    assert got[2][0].dtype == torch.float32 and got[2][1].dtype == torch.float32
    for g, w_ in zip(got[2], want[2]):
        assert (g - w_).norm() <= 0.02 * w_.norm()


def direct_sum_pi_squared(h, w, b, temperature):
    logits = torch.nn.functional.linear(h.double(), w.double(), None if b is None else b.double()) / temperature
    return (torch.softmax(logits, dim=-1) ** 2).sum(-1).float()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("temperature,bias,chunk,vocab", [(1.0, False, 16, 5000), (0.6, True, 1000, 4097)])
def test_fused_sum_pi_squared_matches_the_direct_computation(device, temperature, bias, chunk, vocab):
    """Σπ² from the kernel's running sums (vocab over several 2048-lane blocks, a ragged last one) equals Σ softmax²;
    log-probs and their gradients are the same with and without it."""
    h, w, b, labels = case(on_device(device), vocab=vocab, bias=bias)
    stats = token_stats_from_hidden(h, w, labels, temperature, chunk_size=chunk, compute_sum_pi_squared=True,
                                    lm_head_bias=b, fused=True)
    torch.testing.assert_close(stats.sum_pi_squared, direct_sum_pi_squared(h, w, b, temperature), atol=1e-6, rtol=1e-4)
    assert not stats.sum_pi_squared.requires_grad
    weights = torch.linspace(-1, 1, stats.log_probs.numel(), device=h.device)
    grad_with = torch.autograd.grad((stats.log_probs * weights).sum(), h)[0]
    plain = run(True, h, w, b, labels, temperature, 0.0, chunk)  # log-probs and gradients without Σπ²
    torch.testing.assert_close(stats.log_probs.detach(), plain[0])
    torch.testing.assert_close(grad_with, plain[2][0])


@pytest.mark.gpu
def test_fused_sum_pi_squared_bf16_under_autocast_on_cuda():
    """The actor's mixed precision (bf16 GEMM, 152k vocabulary): the kernel's Σπ² agrees with the torch path's."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    h, w, _, labels = case("cuda", vocab=151936, rows=300, hidden=64)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        want = token_stats_from_hidden(h, w, labels, 0.9, 128, compute_sum_pi_squared=True, fused=False)
        got = token_stats_from_hidden(h, w, labels, 0.9, 128, compute_sum_pi_squared=True, fused=True)
    torch.testing.assert_close(got.sum_pi_squared, want.sum_pi_squared, atol=2e-3, rtol=2e-2)
