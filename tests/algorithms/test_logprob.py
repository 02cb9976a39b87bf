"""Log-probs/entropy/Σπ² from logits, and the chunked hidden-state path equal to the unchunked one."""

import math

import pytest
import torch

from hybridrl.algorithms import (compute_entropy_from_logits, logprobs_and_entropy_from_hidden, logprobs_from_logits,
                                 sum_pi_squared_from_logits, token_stats_from_hidden)

NUM_ROWS, HIDDEN, VOCAB, CHUNK = 7, 4, 11, 3


def test_entropy_and_logprobs_by_hand():
    # uniform logits over 4 classes: entropy ln 4, log-prob ln(1/4)
    logits = torch.zeros(2, 4)
    torch.testing.assert_close(compute_entropy_from_logits(logits), torch.full((2,), math.log(4)))
    torch.testing.assert_close(logprobs_from_logits(logits, torch.tensor([0, 3])), torch.full((2,), -math.log(4)))
    # logits (0, ln 3): probs (1/4, 3/4), entropy = -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.562335
    two_way = torch.tensor([[0.0, math.log(3)]])
    torch.testing.assert_close(compute_entropy_from_logits(two_way), torch.tensor([0.562335]))
    torch.testing.assert_close(logprobs_from_logits(two_way, torch.tensor([1])), torch.tensor([math.log(0.75)]))


def make_inputs(seed=0, with_bias=True):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(NUM_ROWS, HIDDEN, generator=generator).requires_grad_(True)
    weight = torch.randn(VOCAB, HIDDEN, generator=generator).requires_grad_(True)
    bias = torch.randn(VOCAB, generator=generator).requires_grad_(True) if with_bias else None
    labels = torch.randint(0, VOCAB, (NUM_ROWS,), generator=generator)
    return hidden, weight, bias, labels


def unchunked(hidden, weight, bias, labels, temperature):
    logits = torch.nn.functional.linear(hidden, weight, bias).float() / temperature
    return logprobs_from_logits(logits, labels), compute_entropy_from_logits(logits)


@pytest.mark.parametrize("with_bias", [True, False])
def test_chunked_equals_unchunked_values_and_gradients(with_bias):
    inputs = make_inputs(with_bias=with_bias)
    leaves = [t for t in inputs[:3] if t is not None]
    loss_weights = torch.linspace(-1, 1, NUM_ROWS)
    grads = []
    for compute in (unchunked, lambda h, w, b, y, t: logprobs_and_entropy_from_hidden(
            h, w, y, t, chunk_size=CHUNK, lm_head_bias=b)):
        logprobs, entropy = compute(*inputs, 0.7)
        grads.append(torch.autograd.grad((loss_weights * (logprobs + 0.3 * entropy)).sum(), leaves))
        if compute is unchunked:
            expected = (logprobs.detach(), entropy.detach())
    torch.testing.assert_close(logprobs.detach(), expected[0])
    torch.testing.assert_close(entropy.detach(), expected[1])
    for chunked_grad, full_grad in zip(grads[1], grads[0]):
        torch.testing.assert_close(chunked_grad, full_grad)


def saved_tensor_shapes(compute) -> list[tuple[int, ...]]:
    shapes = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: shapes.append(tuple(t.shape)) or t, lambda t: t):
        compute()
    return shapes


def test_backward_keeps_no_vocab_sized_logits():
    hidden, weight, bias, labels = make_inputs()
    chunked = saved_tensor_shapes(
        lambda: logprobs_and_entropy_from_hidden(hidden, weight, labels, 1.0, chunk_size=CHUNK, lm_head_bias=bias))
    full = saved_tensor_shapes(lambda: unchunked(hidden, weight, bias, labels, 1.0))
    # the unchunked graph saves (7, 11) logits/softmax; the checkpointed one only its chunk inputs
    assert (NUM_ROWS, VOCAB) in full
    assert not [shape for shape in chunked if len(shape) == 2 and shape[-1] == VOCAB], chunked


def test_no_grad_path_and_no_entropy():
    hidden, weight, _, labels = make_inputs(with_bias=False)
    with torch.no_grad():
        logprobs, entropy = logprobs_and_entropy_from_hidden(hidden, weight, labels, 1.0, CHUNK, compute_entropy=False)
    assert entropy is None and not logprobs.requires_grad
    torch.testing.assert_close(logprobs, unchunked(hidden, weight, None, labels, 1.0)[0].detach())


def test_invalid_arguments():
    hidden, weight, _, labels = make_inputs()
    with pytest.raises(ValueError, match="chunk_size"):
        logprobs_and_entropy_from_hidden(hidden, weight, labels, 1.0, chunk_size=0)
    with pytest.raises(ValueError, match="temperature"):
        logprobs_and_entropy_from_hidden(hidden, weight, labels, 0.0)


def test_sum_pi_squared_by_hand():
    # uniform over 4: 4 · (1/4)² = 1/4; logits (0, ln 3): (1/4)² + (3/4)² = 10/16; one-hot-like: → 1
    torch.testing.assert_close(sum_pi_squared_from_logits(torch.zeros(2, 4)), torch.full((2,), 0.25))
    torch.testing.assert_close(sum_pi_squared_from_logits(torch.tensor([[0.0, math.log(3)]])), torch.tensor([0.625]))
    torch.testing.assert_close(sum_pi_squared_from_logits(torch.tensor([[0.0, 200.0, -50.0]])), torch.tensor([1.0]))


def direct_sum_pi_squared(hidden, weight, bias, temperature):
    """Σ softmax(l / T)² from the full (N, V) probability tensor, in fp64."""
    logits = torch.nn.functional.linear(hidden.double(), weight.double(), None if bias is None else bias.double())
    return (torch.softmax(logits / temperature, dim=-1) ** 2).sum(-1)


@pytest.mark.parametrize("chunk", [CHUNK, NUM_ROWS, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_sum_pi_squared_equals_the_direct_softmax_computation(chunk, temperature):
    hidden, weight, bias, labels = make_inputs(seed=3)
    with torch.no_grad():
        stats = token_stats_from_hidden(hidden, weight, labels, temperature, chunk_size=chunk,
                                        compute_sum_pi_squared=True, lm_head_bias=bias, fused=False)
    want = direct_sum_pi_squared(hidden, weight, bias, temperature).float()
    torch.testing.assert_close(stats.sum_pi_squared, want, atol=1e-6, rtol=1e-5)
    assert stats.sum_pi_squared.dtype == torch.float32 and stats.sum_pi_squared.shape == (NUM_ROWS,)
    assert ((stats.sum_pi_squared > 0) & (stats.sum_pi_squared <= 1)).all()


def test_sum_pi_squared_from_bf16_weights_within_bf16_tolerance():
    """bf16 hidden and head (the actor's compute dtype): the GEMM rounds the logits, Σπ² follows within ~1%."""
    generator = torch.Generator().manual_seed(5)
    hidden, weight = torch.randn(40, 16, generator=generator), torch.randn(300, 16, generator=generator) * 0.5
    labels = torch.randint(0, 300, (40,), generator=generator)
    stats = token_stats_from_hidden(hidden.bfloat16(), weight.bfloat16(), labels, 1.0, chunk_size=16,
                                    compute_sum_pi_squared=True, fused=False)
    torch.testing.assert_close(stats.sum_pi_squared, direct_sum_pi_squared(hidden, weight, None, 1.0).float(),
                               atol=2e-3, rtol=2e-2)


def test_sum_pi_squared_rides_along_without_changing_log_probs_or_gradients():
    hidden, weight, bias, labels = make_inputs(seed=4)
    plain = token_stats_from_hidden(hidden, weight, labels, 0.8, chunk_size=CHUNK, lm_head_bias=bias, fused=False)
    with_sq = token_stats_from_hidden(hidden, weight, labels, 0.8, chunk_size=CHUNK, compute_sum_pi_squared=True,
                                      lm_head_bias=bias, fused=False)
    assert plain.sum_pi_squared is None and not with_sq.sum_pi_squared.requires_grad  # data, no gradient
    torch.testing.assert_close(with_sq.log_probs, plain.log_probs)
    torch.testing.assert_close(with_sq.entropy, plain.entropy)
    grads = [torch.autograd.grad((s.log_probs + s.entropy).sum(), (hidden, weight)) for s in (plain, with_sq)]
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want)


def test_sum_pi_squared_of_no_rows():
    _, weight, _, _ = make_inputs()
    stats = token_stats_from_hidden(torch.zeros(0, HIDDEN), weight, torch.zeros(0, dtype=torch.long), 1.0,
                                    compute_entropy=False, compute_sum_pi_squared=True, fused=False)
    assert stats.entropy is None and stats.sum_pi_squared.shape == (0,) and stats.log_probs.shape == (0,)
