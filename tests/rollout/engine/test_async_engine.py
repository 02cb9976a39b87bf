"""The asyncio front end (AsyncLLMEngine): many coroutines, one engine loop, abort / cancel / resume."""

import asyncio
from dataclasses import replace

import pytest

from hybridrl.rollout.base import SamplingParams, TokenOutput, resume_request
from hybridrl.rollout.engine.async_engine import AsyncLLMEngine
from tests.rollout.engine.helpers import PROMPTS, make_engine, make_model

SAMPLED = SamplingParams(n=2, seed=7, temperature=0.8, top_k=30, max_new_tokens=12, ignore_eos=True)
GREEDY = SamplingParams(do_sample=False, max_new_tokens=8, ignore_eos=True)
OBSERVATION = [3, 4, 5]  # what the fake tool appends after each turn


@pytest.fixture(scope="module")
def model():
    return make_model("qwen2", seed=4)


@pytest.fixture(scope="module")
def references(model):
    """Each configuration's rows from the batch call, and a 3-turn greedy trajectory run synchronously."""
    engine = make_engine(model)
    rows = {"sampled": engine.generate(PROMPTS, SAMPLED).token_ids, "greedy": engine.generate(PROMPTS, GREEDY).token_ids}
    ids = list(PROMPTS[2])
    for turn in range(3):
        engine.add_request(f"turn{turn}", ids, GREEDY)
        while engine.has_unfinished_requests():
            for _, out in engine.step():
                ids += out.token_ids + OBSERVATION
    return rows, ids


async def trajectory(engine, prompt: list[int]) -> list[int]:
    """Three greedy turns, each followed by a tool call that appends observation tokens."""
    ids = list(prompt)
    for turn in range(3):
        out = await engine.generate(f"trajectory/turn{turn}", ids, GREEDY)
        await asyncio.sleep(0.001)  # the tool
        ids += out.token_ids + OBSERVATION
    return ids


async def one_row(engine, name: str, params: SamplingParams, row: int, delay_steps: int) -> list[int]:
    for _ in range(delay_steps):  # arrive while the others decode
        await asyncio.sleep(0.002)
    prompt = PROMPTS[row // params.n]
    out = await engine.generate(f"{name}/{row}", prompt, replace(params, n=1, row_offset=row))
    return out.token_ids


@pytest.mark.parametrize("step_in_thread", [True, False])
def test_many_concurrent_coroutines_get_the_batch_calls_tokens(model, references, step_in_thread):
    rows, trajectory_ids = references
    engine = AsyncLLMEngine(make_engine(model, max_decode_burst=4), step_in_thread=step_in_thread)

    async def main():
        jobs = [one_row(engine, "sampled", SAMPLED, row, row % 4) for row in range(6)]
        jobs += [one_row(engine, "greedy", GREEDY, row, 3 - row) for row in range(3)]
        return await asyncio.gather(trajectory(engine, PROMPTS[2]), *jobs)

    got_trajectory, *got_rows = asyncio.run(main())
    engine.close()
    assert got_trajectory == trajectory_ids
    assert got_rows == rows["sampled"] + rows["greedy"]
    assert not engine.engine.requests and engine.num_in_flight == 0


def test_abort_from_another_coroutine_returns_the_partial_tokens(model):
    engine = make_engine(model).request_engine()
    long = SamplingParams(seed=1, max_new_tokens=60, ignore_eos=True)

    async def main():
        running = asyncio.create_task(engine.generate("long", PROMPTS[0], long))
        await engine.generate("short", PROMPTS[1], SamplingParams(seed=2, max_new_tokens=2, ignore_eos=True))
        aborted = await engine.abort("long")
        return aborted, await running, await engine.abort("long")

    aborted, returned, again = asyncio.run(main())
    assert aborted == returned and again is None
    assert returned.stop_reason == "abort" and 0 < len(returned.token_ids) < 60


def test_a_cancelled_caller_aborts_its_request(model):
    engine = make_engine(model).request_engine()

    async def main():
        doomed = asyncio.create_task(engine.generate("doomed", PROMPTS[0], SamplingParams(max_new_tokens=60)))
        survivor = asyncio.create_task(engine.generate("survivor", PROMPTS[1], GREEDY))
        await asyncio.sleep(0.01)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return await survivor

    assert len(asyncio.run(main()).token_ids) == 8
    assert not engine.engine.requests  # the cancelled request is no longer decoded


def test_a_bad_request_fails_its_caller_only(model):
    engine = make_engine(model).request_engine()

    async def main():
        good = asyncio.create_task(engine.generate("good", PROMPTS[1], GREEDY))
        await asyncio.sleep(0)  # "good" is in flight
        with pytest.raises(ValueError, match="one sequence"):
            await engine.generate("bad", PROMPTS[0], SamplingParams(n=2))
        with pytest.raises(ValueError, match="already in flight"):
            await engine.generate("good", PROMPTS[0], GREEDY)
        return await good

    assert len(asyncio.run(main()).token_ids) == 8


def test_abort_all_sleep_update_wake_resume_gives_the_uninterrupted_tokens(model):
    """The colocate_async cycle through the front end: seeded sampled rows, cut mid-decode, continue exactly."""
    params = replace(SAMPLED, max_new_tokens=30)
    want = make_engine(model).generate(PROMPTS, params)
    llm = make_engine(model, max_decode_burst=4)
    engine = llm.request_engine()
    rows = {f"row{r}": (PROMPTS[r // 2], replace(params, n=1, row_offset=r)) for r in range(6)}

    async def main() -> dict[str, tuple[TokenOutput, TokenOutput]]:
        tasks = {rid: asyncio.create_task(engine.generate(rid, p, sp)) for rid, (p, sp) in rows.items()}
        await engine.generate("short", [9, 9, 9], SamplingParams(max_new_tokens=3))
        partial = await engine.abort_all()
        assert {rid: await task for rid, task in tasks.items()} == partial
        llm.sleep()
        llm.update_weights(model.named_parameters())
        llm.wake_up()
        resumed = {}
        for rid, (p, sp) in rows.items():
            prompt, rest = resume_request(p, sp, partial[rid])
            resumed[rid] = asyncio.create_task(engine.generate(rid + "/resumed", prompt, rest))
        return {rid: (partial[rid], await task) for rid, task in resumed.items()}

    outputs = asyncio.run(main())
    for r in range(6):
        partial, resumed = outputs[f"row{r}"]
        assert 0 < len(partial.token_ids) < 30 and partial.stop_reason == "abort"
        assert partial.token_ids + resumed.token_ids == want.token_ids[r]


def test_the_front_end_serves_successive_event_loops_and_reports_metrics(model):
    engine = make_engine(model).request_engine()
    first = asyncio.run(engine.generate("a", PROMPTS[0], GREEDY))
    second = asyncio.run(engine.generate("a", PROMPTS[0], GREEDY))  # the same id again, once finished
    assert first.token_ids == second.token_ids and second.prefix_cache_hit_tokens == 12
    metrics = asyncio.run(engine.take_metrics())
    assert metrics["rollout/prefix_cache_hit_tokens"] == 12 and metrics["rollout/decode_steps"] >= 14
    assert engine is engine.engine.request_engine()


@pytest.mark.gpu
def test_on_cuda_concurrent_coroutines_get_the_batch_calls_tokens(model):
    """Steps on the front end's worker thread (bound to the engine's device) with decode graphs."""
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    kwargs = dict(device="cuda", block_size=16, max_num_seqs=16, max_model_len=64)
    want = LLMEngine(model, **kwargs).generate(PROMPTS, SAMPLED).token_ids
    engine = LLMEngine(model, max_decode_burst=4, **kwargs).request_engine()

    async def main():
        return await asyncio.gather(*(one_row(engine, "sampled", SAMPLED, row, row % 3) for row in range(6)))

    assert asyncio.run(main()) == want
