"""The hf backend's request API (the reference): requests one at a time, stop ids, abort and resume."""

import asyncio
import dataclasses

import pytest
import torch

from hybridrl.rollout.base import SamplingParams, TokenOutput, resume_request
from hybridrl.rollout.hf_backend import HFRolloutBackend
from tests.rollout.engine.helpers import PROMPTS, make_model

GREEDY = SamplingParams(do_sample=False, max_new_tokens=10, ignore_eos=True)


@pytest.fixture(scope="module")
def backend():
    return HFRolloutBackend(make_model("qwen2", seed=4), pad_token_id=0)


def test_concurrent_requests_give_the_batch_calls_greedy_tokens(backend):
    want = backend.generate(PROMPTS, GREEDY)
    engine = backend.request_engine()

    async def main():
        return await asyncio.gather(*(engine.generate(str(i), p, GREEDY) for i, p in enumerate(PROMPTS)))

    outputs = asyncio.run(main())
    assert [o.token_ids for o in outputs] == want.token_ids
    for out, log_probs in zip(outputs, want.log_probs):
        torch.testing.assert_close(torch.tensor(out.log_probs), torch.tensor(log_probs), atol=1e-5, rtol=0)
    assert {o.stop_reason for o in outputs} == {"length"} and engine is backend.request_engine()


def test_stop_token_ids_end_a_request_and_are_kept(backend):
    free = backend.generate_request(PROMPTS[0], GREEDY).token_ids
    cut = next(i for i in range(2, len(free)) if free[i] not in free[:i])
    stopped = backend.generate_request(PROMPTS[0], SamplingParams(do_sample=False, max_new_tokens=10, ignore_eos=True,
                                                                  stop_token_ids=(free[cut],)))
    assert stopped.token_ids == free[:cut + 1] and stopped.stop_reason == "stop"


def test_an_aborted_request_resumes_exactly(backend):
    whole = backend.generate_request(PROMPTS[1], GREEDY)
    checks = iter(range(100))
    partial = backend.generate_request(PROMPTS[1], GREEDY, should_abort=lambda: next(checks) >= 3)
    assert partial.stop_reason == "abort" and len(partial.token_ids) == 4  # checked after each token
    prompt, rest = resume_request(PROMPTS[1], GREEDY, partial)
    resumed = backend.generate_request(prompt, rest)
    assert partial.token_ids + resumed.token_ids == whole.token_ids


def test_abort_of_a_waiting_request_and_of_an_unknown_one(backend):
    engine = backend.request_engine()

    async def main():
        first = asyncio.create_task(engine.generate("first", PROMPTS[0], GREEDY))
        second = asyncio.create_task(engine.generate("second", PROMPTS[1], GREEDY))
        await asyncio.sleep(0)  # both queued; the worker has taken the first
        aborted = await engine.abort("second")
        return aborted, await second, await first, await engine.abort("nobody")

    aborted, second, first, nobody = asyncio.run(main())
    assert aborted == second == TokenOutput([], [], "abort")
    assert len(first.token_ids) == 10 and nobody is None


def test_a_request_is_one_sequence(backend):
    with pytest.raises(ValueError, match="one sequence"):
        backend.generate_request(PROMPTS[0], SamplingParams(n=2))


def test_seeded_rows_of_one_prompt_sample_their_own_streams(backend):
    """n samples of one prompt are requests with row_offset 0..n-1: on CPU (whose generator keeps a seed's low 32
    bits) they must still draw different tokens, and the same offset the same tokens."""
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=7)
    draws = [backend.generate_request(PROMPTS[0], dataclasses.replace(params, row_offset=offset)).token_ids
             for offset in (0, 1, 2, 1)]
    assert draws[1] == draws[3]
    assert len({tuple(d) for d in draws}) == 3
    later_round = dataclasses.replace(params, seed=7 + (1 << 48))  # the trainer's seed of a dynamic-sampling round
    assert backend.generate_request(PROMPTS[0], later_round).token_ids != draws[0]
