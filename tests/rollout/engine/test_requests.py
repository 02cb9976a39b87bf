"""The engine's request API (add / abort / step): per-request sampling parameters in one running batch,
stop ids and budgets, abort and exact resume, prefix-cache reuse by follow-up turns."""

from array import array
from dataclasses import replace

import pytest
import torch

from hybridrl.rollout.base import SamplingParams, TokenOutput, resume_request
from hybridrl.rollout.engine.block_manager import prompt_hash_chain
from tests.rollout.engine.helpers import PROMPTS, hf_generate_greedy, make_engine, make_model

# Three batch calls with different settings; a request (seed, row_offset=row) samples that call's row.
CALLS = {
    "greedy": SamplingParams(do_sample=False, max_new_tokens=10, ignore_eos=True),
    "top_k_p": SamplingParams(n=2, seed=7, temperature=0.8, top_k=30, top_p=0.95, max_new_tokens=12, ignore_eos=True),
    "hot_short": SamplingParams(n=2, seed=9, temperature=1.3, max_new_tokens=5, ignore_eos=True,
                                stop_token_ids=(13, 70)),
}


@pytest.fixture(scope="module")
def model():
    return make_model("qwen2", seed=4)


@pytest.fixture(scope="module")
def batch_outputs(model):
    return {name: make_engine(model).generate(PROMPTS, params) for name, params in CALLS.items()}


def request_rows(name: str):
    """(request id, prompt, params) of every row of CALLS[name], as one request each."""
    params = CALLS[name]
    for row in range(len(PROMPTS) * params.n):
        yield f"{name}/{row}", PROMPTS[row // params.n], replace(params, n=1, row_offset=row)


def run_until_done(engine, outputs: dict[str, TokenOutput] | None = None) -> dict[str, TokenOutput]:
    outputs = {} if outputs is None else outputs
    while engine.has_unfinished_requests():
        outputs.update(engine.step())
    return outputs


def interleaved_rows(engine) -> dict[str, TokenOutput]:
    """Every row of CALLS as a request, added in a mixed order with 0-2 steps between adds, beside a
    stranger that is aborted half-way; the finished requests' outputs."""
    pending = [row for name in CALLS for row in request_rows(name)]
    order = pending[1::2] + pending[0::2]  # calls and rows mixed
    outputs: dict[str, TokenOutput] = {}
    engine.add_request("stranger", PROMPTS[0], SamplingParams(seed=1, max_new_tokens=30, ignore_eos=True))
    for i, (request_id, prompt, params) in enumerate(order):
        engine.add_request(request_id, prompt, params)
        for _ in range(i % 3):  # some join while others decode
            outputs.update(engine.step())
        if i == 6:
            assert engine.abort_request("stranger").stop_reason == "abort"
    run_until_done(engine, outputs)
    assert "stranger" not in outputs and len(outputs) == len(order)
    return outputs


def assert_rows_equal_batch_calls(outputs: dict[str, TokenOutput], batch_outputs, atol: float) -> None:
    for name, want in batch_outputs.items():
        for row, (request_id, _, _) in enumerate(request_rows(name)):
            got = outputs[request_id]
            assert got.token_ids == want.token_ids[row], request_id
            torch.testing.assert_close(torch.tensor(got.log_probs), torch.tensor(want.log_probs[row]),
                                       atol=atol, rtol=0)
            assert got.stop_reason == ("stop" if got.token_ids[-1] in (13, 70) else "length")
    assert any(o.stop_reason == "stop" for o in outputs.values())  # the stop ids did end some rows


def test_interleaved_requests_with_their_own_params_equal_the_batch_calls(model, batch_outputs):
    """Rows of three differently-configured batch calls share one running batch (greedy, top-k/top-p and
    plain sampled rows side by side) and sample exactly what their batch call sampled."""
    outputs = interleaved_rows(make_engine(model, max_decode_burst=4))
    assert_rows_equal_batch_calls(outputs, batch_outputs, atol=1e-5)


@pytest.mark.gpu
def test_on_cuda_interleaved_requests_equal_the_batch_calls(model):
    """The same on CUDA: decode graphs, the fused sampler with per-row settings beside the torch top-k/top-p
    group, bursts queued behind each other. (CPU sampled these stop ids; CUDA may stop elsewhere.)"""
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    kwargs = dict(device="cuda", block_size=16, max_num_seqs=16, max_model_len=64)
    batch_outputs = {name: LLMEngine(model, **kwargs).generate(PROMPTS, params) for name, params in CALLS.items()}
    outputs = interleaved_rows(LLMEngine(model, max_decode_burst=4, **kwargs))
    for name, want in batch_outputs.items():
        for row, (request_id, _, _) in enumerate(request_rows(name)):
            assert outputs[request_id].token_ids == want.token_ids[row], request_id
            torch.testing.assert_close(torch.tensor(outputs[request_id].log_probs), torch.tensor(want.log_probs[row]),
                                       atol=1e-4, rtol=0)


def test_request_greedy_equals_hf_greedy(model):
    engine = make_engine(model)
    for i, prompt in enumerate(PROMPTS):
        engine.add_request(str(i), prompt, SamplingParams(do_sample=False, max_new_tokens=14))
    outputs = run_until_done(engine)
    assert [outputs[str(i)].token_ids for i in range(len(PROMPTS))] == [hf_generate_greedy(model, p, 14)
                                                                        for p in PROMPTS]


def test_stop_token_ids_end_a_request_and_are_kept(model):
    engine = make_engine(model)
    engine.add_request("free", PROMPTS[0], SamplingParams(do_sample=False, max_new_tokens=12, ignore_eos=True))
    free = run_until_done(engine)["free"].token_ids
    cut = next(i for i in range(2, len(free)) if free[i] not in free[:i])  # its first occurrence
    engine.add_request("stopped", PROMPTS[0], SamplingParams(do_sample=False, max_new_tokens=12, ignore_eos=True,
                                                             stop_token_ids=(free[cut],)))
    stopped = run_until_done(engine)["stopped"]
    assert stopped.token_ids == free[:cut + 1] and stopped.stop_reason == "stop"
    assert len(stopped.log_probs) == cut + 1


def test_per_request_max_new_tokens_and_the_model_length(model):
    engine = make_engine(model, max_model_len=20)
    budgets = {"a": 1, "b": 3, "c": 7, "long": 50}  # "long" stops at the model's length: 20 - 9 prompt tokens
    for request_id, budget in budgets.items():
        engine.add_request(request_id, PROMPTS[2], SamplingParams(seed=3, max_new_tokens=budget, ignore_eos=True,
                                                                  row_offset=len(request_id)))
    outputs = run_until_done(engine)
    assert {k: len(o.token_ids) for k, o in outputs.items()} == {"a": 1, "b": 3, "c": 7, "long": 11}
    assert {o.stop_reason for o in outputs.values()} == {"length"}


def test_abort_returns_the_partial_tokens(model):
    params = SamplingParams(seed=5, max_new_tokens=20, ignore_eos=True)
    engine = make_engine(model, max_decode_burst=4)
    engine.add_request("whole", PROMPTS[1], params)
    whole = run_until_done(engine)["whole"]
    engine.add_request("cut", PROMPTS[1], params)
    engine.add_request("waiting", PROMPTS[0], params)
    for _ in range(3):  # prefill, then two decode bursts
        engine.step()
    assert engine.abort_request("missing") is None
    cut = engine.abort_request("cut")
    assert cut.stop_reason == "abort" and 0 < len(cut.token_ids) < 20
    assert cut.token_ids == whole.token_ids[:len(cut.token_ids)] and len(cut.log_probs) == len(cut.token_ids)
    engine.add_request("queued", PROMPTS[2], params)
    assert engine.abort_request("queued") == TokenOutput([], [], "abort")  # aborted before its prefill
    assert engine.abort_request("cut") is None  # no longer in flight
    outputs = run_until_done(engine)
    assert set(outputs) == {"waiting"} and engine.block_manager.num_used_blocks == 0


@pytest.mark.parametrize("do_sample", [False, True])
@pytest.mark.parametrize("steps_before_abort", [1, 2, 4])
def test_a_resumed_request_continues_as_if_never_interrupted(model, do_sample, steps_before_abort):
    """Abort, sleep, update the weights (the same ones), wake up, resume with the kept tokens: the
    colocate_async cycle. The resumed tokens and log-probs continue the uninterrupted request's exactly
    (seeded sampling too: the noise is keyed by the absolute position)."""
    params = SamplingParams(do_sample=do_sample, seed=11, row_offset=3, temperature=0.9, top_k=40,
                            max_new_tokens=24, ignore_eos=True)
    engine = make_engine(model, max_decode_burst=4)
    engine.add_request("r", PROMPTS[0], params)
    whole = run_until_done(engine)["r"]
    engine.add_request("r", PROMPTS[0], params)
    engine.add_request("other", PROMPTS[1], replace(params, row_offset=4))
    for _ in range(steps_before_abort):
        engine.step()
    partial = engine.abort_request("r")
    engine.abort_request("other")
    engine.sleep()
    engine.update_weights(model.named_parameters())
    engine.wake_up()
    prompt, rest = resume_request(PROMPTS[0], params, partial)
    waiting = len(engine.resumed_chains)  # the aborted requests' written blocks' chains ("other"'s: if it has one)
    request = engine.make_request("r-resumed", prompt, rest)  # its prefix hashes: "r"'s chain, extended
    assert request.prompt_block_hashes == prompt_hash_chain(array("q", prompt), engine.block_size) != []
    assert waiting >= 1 and len(engine.resumed_chains) == waiting - 1
    engine.submit_request(request)
    resumed = run_until_done(engine)["r-resumed"]
    assert 0 < len(partial.token_ids) < 24
    assert partial.token_ids + resumed.token_ids == whole.token_ids
    torch.testing.assert_close(torch.tensor(partial.log_probs + resumed.log_probs), torch.tensor(whole.log_probs),
                               atol=1e-5, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("do_sample", [False, True])
def test_on_cuda_a_resumed_request_continues_as_if_never_interrupted(model, do_sample):
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    params = SamplingParams(do_sample=do_sample, seed=11, row_offset=3, max_new_tokens=40, ignore_eos=True)
    engine = LLMEngine(model, device="cuda", block_size=16, max_num_seqs=8, max_model_len=64, max_decode_burst=4)
    engine.add_request("r", PROMPTS[0], params)
    whole = run_until_done(engine)["r"]
    engine.add_request("r", PROMPTS[0], params)
    for _ in range(3):
        engine.step()
    partial = engine.abort_request("r")
    engine.sleep()
    engine.wake_up()
    prompt, rest = resume_request(PROMPTS[0], params, partial)
    engine.add_request("r-resumed", prompt, rest)
    resumed = run_until_done(engine)["r-resumed"]
    assert 0 < len(partial.token_ids) < 40 and partial.token_ids + resumed.token_ids == whole.token_ids


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_a_follow_up_turn_reuses_the_earlier_turns_kv(model, prefix_caching):
    """Turn 2's prompt = turn 1's prompt + output + 3 observation tokens: the full blocks of turn 1 whose KV
    was written (all its tokens but the last) come from the prefix cache, decode-filled blocks included."""
    engine = make_engine(model, enable_prefix_caching=prefix_caching, max_decode_burst=4)
    turn = SamplingParams(do_sample=False, max_new_tokens=9, ignore_eos=True)
    engine.add_request("t1", PROMPTS[0], turn)
    first = run_until_done(engine)["t1"]
    engine.take_metrics()
    second_prompt = PROMPTS[0] + first.token_ids + [3, 4, 5]
    engine.add_request("t2", second_prompt, turn)
    second = run_until_done(engine)["t2"]
    metrics = engine.take_metrics()
    written = len(PROMPTS[0]) + len(first.token_ids) - 1  # 20 tokens: 5 full blocks of 4
    hits = written // 4 * 4 if prefix_caching else 0
    assert second.prefix_cache_hit_tokens == hits and metrics["rollout/prefix_cache_hit_tokens"] == hits
    assert metrics["rollout/prefill_tokens"] == len(second_prompt) - hits and metrics["rollout/prefill_steps"] == 1
    cold = make_engine(model, enable_prefix_caching=False)
    cold.add_request("t2", second_prompt, turn)
    assert run_until_done(cold)["t2"].token_ids == second.token_ids  # the cached KV is the right KV


def test_request_errors_name_the_cause(model):
    engine = make_engine(model, max_model_len=16)
    with pytest.raises(ValueError, match="n=2.*one sequence"):
        engine.add_request("a", PROMPTS[0], SamplingParams(n=2))
    with pytest.raises(ValueError, match="max_new_tokens .0. must be >= 1"):
        engine.add_request("a", PROMPTS[0], SamplingParams(max_new_tokens=0))
    with pytest.raises(ValueError, match="16 tokens.*max_model_len is 16"):
        engine.add_request("a", list(range(3, 19)), SamplingParams())
    engine.add_request("a", PROMPTS[1], SamplingParams(max_new_tokens=4))
    with pytest.raises(ValueError, match="already in flight"):
        engine.add_request("a", PROMPTS[1], SamplingParams(max_new_tokens=4))
    with pytest.raises(RuntimeError, match="1 requests of the request API are in flight"):
        engine.generate(PROMPTS, SamplingParams(max_new_tokens=4))
    for action in (engine.sleep, lambda: engine.update_weights(model.named_parameters())):
        with pytest.raises(RuntimeError, match="requests in flight; abort them first"):
            action()
    engine.abort_request("a")
    engine.sleep()
    with pytest.raises(RuntimeError, match="asleep; call wake_up"):
        engine.add_request("b", PROMPTS[1], SamplingParams())


def test_batch_calls_and_requests_keep_their_metrics_apart(model):
    engine = make_engine(model)
    engine.add_request("a", PROMPTS[0], SamplingParams(max_new_tokens=5, ignore_eos=True))
    run_until_done(engine)
    batch = engine.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=7, ignore_eos=True))
    requests = engine.take_metrics()
    assert batch.metrics["rollout/prefill_tokens"] > 0 and requests["rollout/prefill_tokens"] == len(PROMPTS[0])
    assert batch.metrics["rollout/decode_steps"] >= 6 and requests["rollout/decode_steps"] >= 4
    assert engine.take_metrics()["rollout/decode_steps"] == 0  # taken


def test_an_interrupted_batch_call_leaves_no_rows_behind(model, monkeypatch):
    engine = make_engine(model)
    params = SamplingParams(n=2, seed=4, max_new_tokens=6, ignore_eos=True)
    want = engine.generate(PROMPTS, params)
    launch_burst = engine.runner.launch_burst

    def fail_once(*args):
        monkeypatch.setattr(engine.runner, "launch_burst", launch_burst)
        raise KeyboardInterrupt

    monkeypatch.setattr(engine.runner, "launch_burst", fail_once)
    with pytest.raises(KeyboardInterrupt):
        engine.generate(PROMPTS, params)
    assert not engine.core.has_work and engine.block_manager.num_used_blocks == 0
    assert engine.generate(PROMPTS, params).token_ids == want.token_ids
