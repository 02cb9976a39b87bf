"""Samplers of a decode step: a batch whose rows have their own settings samples each row as it would alone."""

import pytest
import torch

from hybridrl.rollout.engine.decode_step import make_sampler, sampler_for
from hybridrl.rollout.engine.sampler import row_key, sample
from hybridrl.rollout.engine.sequence import SamplingSpec

CPU = torch.device("cpu")
MIXED = [SamplingSpec(1.0), SamplingSpec(0.7, top_k=5), SamplingSpec(greedy=True), SamplingSpec(1.2, top_p=0.8),
         SamplingSpec(0.7, top_k=5), SamplingSpec(greedy=True, top_k=3), SamplingSpec(0.5), SamplingSpec(0.9, 8, 0.9)]


def case(rows: int, vocab: int = 97, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=gen) * 2
    keys = torch.tensor([row_key(seed, r) for r in range(rows)])
    positions = torch.randint(0, 500, (rows,), generator=gen)
    return logits, keys, positions


@pytest.mark.parametrize("specs", [MIXED, MIXED[:3], [SamplingSpec(0.8), SamplingSpec(1.1), SamplingSpec(greedy=True)]])
def test_mixed_rows_sample_as_each_row_alone(specs):
    """Several truncation groups, or one group with per-row temperature / greedy: row i's token and log-prob
    are those of `make_sampler(specs[i])` on row i alone."""
    logits, keys, positions = case(len(specs))
    tokens, logprobs = sampler_for(specs, CPU)(logits, keys, positions)
    for i, spec in enumerate(specs):
        alone_token, alone_logprob = make_sampler(spec, CPU)(logits[i:i + 1], keys[i:i + 1], positions[i:i + 1])
        assert tokens[i] == alone_token[0], (i, spec)
        torch.testing.assert_close(logprobs[i], alone_logprob[0], atol=1e-6, rtol=0)
    greedy_rows = [i for i, s in enumerate(specs) if s.greedy]
    assert tokens[greedy_rows].tolist() == logits[greedy_rows].argmax(-1).tolist()


def test_equal_specs_take_the_one_setting_path():
    """Equal settings (distinct objects, as separate requests carry them) sample like a batch call's shared spec."""
    logits, keys, positions = case(4)
    specs = [SamplingSpec(0.7, top_k=5) for _ in range(4)]
    tokens, logprobs = sampler_for(specs, CPU)(logits, keys, positions)
    want_tokens, want_logprobs = sample(logits, 0.7, 5, 1.0, False, keys, positions)
    assert torch.equal(tokens, want_tokens) and torch.equal(logprobs, want_logprobs)
