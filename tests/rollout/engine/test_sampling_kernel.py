"""The fused Triton sampler vs `sampler.sample` (the torch reference), and decode-step input advance.

Triton tests run in a TRITON_INTERPRET=1 subprocess on CPU (see test_triton_decode.py for why)."""

from __future__ import annotations

import pytest
import torch

from hybridrl.rollout.engine.decode_step import advance_decode_inputs
from hybridrl.rollout.engine.sampler import row_key, sample
from tests.triton_interpreter import INTERPRETED

interpreted = pytest.mark.skipif(not INTERPRETED, reason="runs in tests/test_triton_on_cpu.py's interpreter subprocess")


def random_case(rows: int, vocab: int, dtype=torch.bfloat16, device="cpu", seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(rows, vocab, generator=gen) * 3).to(dtype).to(device)
    keys = torch.tensor([row_key(seed, r) for r in range(rows)], dtype=torch.int64, device=device)
    steps = torch.randint(0, 4096, (rows,), generator=gen).to(device)
    return logits, keys, steps


def fused(logits, keys, steps, temperature, greedy):
    from hybridrl.rollout.engine.sampling_kernel import fused_sample

    device = logits.device
    return fused_sample(logits, keys, steps, torch.tensor([temperature], device=device),
                        torch.tensor([int(greedy)], dtype=torch.int32, device=device))


@interpreted
@pytest.mark.parametrize("temperature,greedy", [(1.0, False), (0.6, False), (1.3, True)])
def test_fused_sampler_matches_torch_sampler(temperature, greedy):
    logits, keys, steps = random_case(7, 5003)  # vocab not a multiple of the kernel's block
    tokens, logprobs = fused(logits, keys, steps, temperature, greedy)
    want_tokens, want_logprobs = sample(logits, temperature, -1, 1.0, greedy, keys, steps)
    assert tokens.tolist() == want_tokens.tolist()
    torch.testing.assert_close(logprobs, want_logprobs, atol=1e-5, rtol=0)


@interpreted
def test_fused_sampler_skips_minus_infinity_logits_like_torch():
    """Banned tokens (-inf): whole vocabulary slices of -inf and lanes that start with -inf add nothing to
    the log-sum-exp and are never picked."""
    logits, keys, steps = random_case(4, 5003, dtype=torch.float32, seed=2)
    logits[0, :3000] = float("-inf")  # the first slices of row 0 hold nothing but -inf
    logits[1, ::2] = float("-inf")
    logits[2, 1:] = float("-inf")  # one token left: log-prob 0
    tokens, logprobs = fused(logits, keys, steps, 1.0, False)
    want_tokens, want_logprobs = sample(logits, 1.0, -1, 1.0, False, keys, steps)
    assert tokens.tolist() == want_tokens.tolist() and tokens[2] == 0 and tokens[1] % 2 == 1
    torch.testing.assert_close(logprobs, want_logprobs, atol=1e-5, rtol=0)


@interpreted
def test_fused_sampler_noise_depends_on_key_and_step():
    logits = torch.zeros(4, 3000)  # flat logits: the token is decided by the noise alone
    keys = torch.tensor([1, 1, 2, 2], dtype=torch.int64)
    steps = torch.tensor([5, 6, 5, 5], dtype=torch.int64)
    tokens, logprobs = fused(logits, keys, steps, 1.0, False)
    assert tokens[2] == tokens[3] and tokens[0] != tokens[1] and tokens[0] != tokens[2]
    torch.testing.assert_close(logprobs, torch.full((4,), -torch.log(torch.tensor(3000.0)).item()))


@interpreted
def test_fused_sampler_writes_into_given_buffers():
    from hybridrl.rollout.engine.sampling_kernel import fused_sample

    logits, keys, steps = random_case(3, 700, dtype=torch.float32)
    tokens, logprobs = torch.full((3,), -1, dtype=torch.int64), torch.zeros(3)
    out = fused_sample(logits, keys, steps, torch.tensor([1.0]), torch.tensor([0], dtype=torch.int32), tokens, logprobs)
    assert out[0] is tokens and out[1] is logprobs and tokens.ge(0).all()


@interpreted
def test_fused_sampler_takes_one_setting_per_row():
    """Requests with their own temperature and greedy flag in one batch: each row as the torch sampler
    samples it with per-row settings (itself checked against one call per row in test_decode_step.py)."""
    from hybridrl.rollout.engine.sampling_kernel import fused_sample

    logits, keys, steps = random_case(6, 3001, seed=4)
    temperature = torch.tensor([1.0, 0.6, 1.3, 0.9, 1.0, 0.5])
    greedy = torch.tensor([0, 1, 0, 0, 1, 0], dtype=torch.int32)
    tokens, logprobs = fused_sample(logits, keys, steps, temperature, greedy)
    want_tokens, want_logprobs = sample(logits, temperature, -1, 1.0, greedy.bool(), keys, steps)
    assert tokens.tolist() == want_tokens.tolist()
    torch.testing.assert_close(logprobs, want_logprobs, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="one per row"):
        fused_sample(logits, keys, steps, temperature[:2], greedy[:2])


def test_advance_moves_rows_within_their_limit_and_freezes_the_rest():
    block_size = 4
    tables = torch.tensor([[3, 5, 0], [7, 8, 9]], dtype=torch.int32)
    ids, positions = torch.tensor([1, 2]), torch.tensor([3, 9])
    context_lens, slots = torch.tensor([4, 10], dtype=torch.int32), torch.tensor([15, 37])
    limits = torch.tensor([6, 10])  # row 1 is at its last reserved position
    advance_decode_inputs(ids, positions, tables, context_lens, slots, torch.tensor([42, 43]), limits, block_size)
    assert ids.tolist() == [42, 43]
    assert positions.tolist() == [4, 9] and context_lens.tolist() == [5, 10]
    assert slots.tolist() == [5 * 4 + 0, -1]  # position 4 = block 1 of row 0 (id 5), offset 0; row 1 writes nothing


@pytest.mark.gpu
def test_fused_sampler_on_cuda_matches_torch_on_a_real_vocabulary():
    """Qwen2.5 vocabulary, bf16 logits: the same tokens up to the noise's float rounding (near-ties)."""
    logits, keys, steps = random_case(512, 151936, device="cuda")
    tokens, logprobs = fused(logits, keys, steps, 1.0, False)
    want_tokens, want_logprobs = sample(logits, 1.0, -1, 1.0, False, keys, steps)
    same = tokens == want_tokens
    assert same.float().mean() >= 0.99
    torch.testing.assert_close(logprobs[same], want_logprobs[same], atol=1e-4, rtol=0)
    greedy_tokens, _ = fused(logits, keys, steps, 1.0, True)
    assert greedy_tokens.tolist() == logits.float().argmax(-1).tolist()
