"""The GenRM server on loopback over the tiny model (hf backend): SGLang's /generate and OpenAI's chat/completions
shapes against the backend's own greedy output, refusals as JSON, requests at once, and a clean shutdown."""

from __future__ import annotations

import http.client
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from hybridrl.models.hf import load_causal_lm, load_tokenizer
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.hf_backend import HFRolloutBackend
from hybridrl.serving.generate_server import GenerateApp, GenerateServer
from hybridrl.serving.limits import ServeLimits

GREEDY = {"temperature": 0, "max_new_tokens": 6}
THREAD_PREFIXES = ("hybridrl-genrm", "hybridrl-serve", "hybridrl-hf-requests")


@pytest.fixture(scope="module")
def parts(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir).eval()
    tokenizer = load_tokenizer(tiny_model_dir)
    # ignore_eos keeps every answer max_new_tokens long, so the comparisons below cover every token
    backend = HFRolloutBackend(model, pad_token_id=tokenizer.pad_token_id, eos_token_ids=[tokenizer.eos_token_id])
    return backend, tokenizer, model.config.vocab_size


def start(parts, max_model_len: int = 64) -> GenerateServer:
    backend, tokenizer, vocab_size = parts
    app = GenerateApp(backend.request_engine(), tokenizer, "tiny-genrm", max_model_len, vocab_size)
    return GenerateServer(app, ServeLimits(workers=4)).start()


@pytest.fixture
def server(parts):
    server = start(parts)
    yield server
    server.close()


def call(address: str, method: str, path: str, body: bytes | dict | None = None) -> tuple[int, dict]:
    host, port = address.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def greedy_ids(parts, prompt_ids: list[int], max_new_tokens: int = 6) -> list[int]:
    backend = parts[0]
    params = SamplingParams(do_sample=False, temperature=0.0, max_new_tokens=max_new_tokens, ignore_eos=True)
    return backend.generate([prompt_ids], params).token_ids[0]


def test_generate_with_input_ids_answers_sglang_shape(server, parts):
    tokenizer = parts[1]
    prompt = tokenizer("12+34=")["input_ids"]
    status, body = call(server.address, "POST", "/generate",
                        {"input_ids": prompt, "sampling_params": {**GREEDY, "ignore_eos": True}, "return_logprob": True})
    assert status == 200, body
    assert body["output_ids"] == greedy_ids(parts, prompt)
    assert body["text"] == tokenizer.decode(body["output_ids"], skip_special_tokens=True)
    meta = body["meta_info"]
    assert meta["prompt_tokens"] == len(prompt) and meta["completion_tokens"] == 6
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    assert [entry[1] for entry in meta["output_token_logprobs"]] == body["output_ids"]
    assert all(entry[0] <= 0 for entry in meta["output_token_logprobs"])


def test_generate_with_text_tokenizes_it(server, parts):
    tokenizer = parts[1]
    status, body = call(server.address, "POST", "/generate",
                        {"text": "7+8=", "sampling_params": {**GREEDY, "ignore_eos": True}})
    assert status == 200, body
    assert body["output_ids"] == greedy_ids(parts, tokenizer("7+8=")["input_ids"])


def test_a_batched_generate_answers_each_prompt_in_order(server, parts):
    tokenizer = parts[1]
    prompts = [tokenizer("1+1=")["input_ids"], tokenizer("22+3=")["input_ids"]]
    status, body = call(server.address, "POST", "/generate",
                        {"input_ids": prompts, "sampling_params": [{**GREEDY, "ignore_eos": True},
                                                                   {**GREEDY, "max_new_tokens": 2, "ignore_eos": True}]})
    assert status == 200, body
    assert [answer["output_ids"] for answer in body] == [greedy_ids(parts, prompts[0]), greedy_ids(parts, prompts[1], 2)]
    status, body = call(server.address, "POST", "/generate", {"text": ["1+1=", "2+2="], "sampling_params": GREEDY})
    assert status == 200 and len(body) == 2 and body[0]["meta_info"]["prompt_tokens"] == 4
    status, body = call(server.address, "POST", "/generate", {"text": ["1+1=", "2+2="], "sampling_params": [GREEDY]})
    assert status == 400 and "a list of 1 for 2 prompts" in body["error"]["message"]


def test_chat_completions_renders_the_chat_template(server, parts):
    tokenizer = parts[1]
    messages = [{"role": "user", "content": "Rate 3+4=7 from 1 to 10"}]
    status, body = call(server.address, "POST", "/v1/chat/completions",
                        {"model": "/any/name", "messages": messages, "max_tokens": 5, "temperature": 0,
                         "ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}})
    assert status == 200, body
    prompt = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False, add_generation_prompt=True)
    expected = tokenizer.decode(greedy_ids(parts, prompt, 5), skip_special_tokens=True)
    parts_message = [{"role": "user", "content": [{"type": "text", "text": "Rate 3+4=7 "},
                                                  {"type": "text", "text": "from 1 to 10"}]}]
    status, joined = call(server.address, "POST", "/v1/chat/completions",
                          {"messages": parts_message, "max_tokens": 5, "temperature": 0, "ignore_eos": True})
    assert status == 200 and joined["choices"][0]["message"]["content"] == expected  # text parts joined
    assert body["object"] == "chat.completion" and body["model"] == "/any/name"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": expected} and choice["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 5, "total_tokens": len(prompt) + 5}


def test_completions_and_health_and_models(server, parts):
    status, body = call(server.address, "POST", "/v1/completions",
                        {"prompt": "9+9=", "max_tokens": 4, "temperature": 0, "ignore_eos": True})
    assert status == 200, body
    expected = parts[1].decode(greedy_ids(parts, parts[1]("9+9=")["input_ids"], 4), skip_special_tokens=True)
    assert body["object"] == "text_completion" and body["choices"][0]["text"] == expected
    assert call(server.address, "GET", "/health") == (200, {"status": "ok"})
    status, models = call(server.address, "GET", "/v1/models")
    assert status == 200 and models["data"][0]["id"] == "tiny-genrm"


def test_a_budget_past_the_context_stops_at_its_end(parts):
    server = start(parts, max_model_len=10)
    try:
        prompt = parts[1]("1+2=")["input_ids"]
        status, body = call(server.address, "POST", "/generate",
                            {"input_ids": prompt, "sampling_params": {"max_new_tokens": 100, "ignore_eos": True}})
        assert status == 200 and len(body["output_ids"]) == 10 - len(prompt)
        assert body["meta_info"]["finish_reason"]["type"] == "length"
        status, body = call(server.address, "POST", "/generate", {"input_ids": [5] * 10})
        assert status == 400 and "at most 10 tokens" in body["error"]["message"]
    finally:
        server.close()


@pytest.mark.parametrize(("path", "payload", "phrase"), [
    ("/generate", b"{not json", "not valid JSON"),
    ("/generate", b"", "no body"),
    ("/generate", {"sampling_params": {}}, "exactly one of 'input_ids'"),
    ("/generate", {"input_ids": [5], "text": "x"}, "exactly one of 'input_ids'"),
    ("/generate", {"input_ids": [5, 10**6]}, "input_ids[1] = 1000000 is not a token id"),
    ("/generate", {"input_ids": [5], "sampling_params": {"n": 2}}, "one sequence per request"),
    ("/generate", {"input_ids": [5], "sampling_params": {"temperture": 0}}, "unsupported field(s) ['temperture']"),
    ("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 0}}, "'max_new_tokens' = 0"),
    ("/generate", {"input_ids": [5], "stream": True}, "'stream': true is not supported"),
    ("/v1/chat/completions", {"max_tokens": 3}, "missing field 'messages'"),
    ("/v1/chat/completions", {"messages": [{"content": "x"}]}, "messages[0] must be an object with a string 'role'"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "frequency_penalty": 0.5},
     "'frequency_penalty' = 0.5 is not supported"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stop": ["\n"]}, "'stop'"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content: only text parts"),
    ("/v1/completions", {"prompt": []}, "'prompt' must be a non-empty string"),
    ("/v1/completions", {"prompt": "x", "chat_template_kwargs": {}}, "'chat_template_kwargs' must be a JSON object, on"),
    ("/v1/embeddings", {"input": "x"}, "no route POST /v1/embeddings"),
])
def test_bad_requests_get_a_json_error_naming_the_problem(server, path, payload, phrase):
    status, body = call(server.address, "POST", path, payload)
    assert status == (404 if "embeddings" in path else 400)
    assert body["error"]["code"] == status and phrase in body["error"]["message"], body
    metrics = server.app.stats.take()
    assert (metrics["reward_model/genrm/errors"], metrics["reward_model/genrm/requests"]) == (1.0, 0.0)


def test_requests_at_once_each_get_their_own_answer(server, parts):
    tokenizer = parts[1]
    prompts = [tokenizer(f"{a}+{a}=")["input_ids"] for a in range(6)]

    def ask(prompt):
        return call(server.address, "POST", "/generate",
                    {"input_ids": prompt, "sampling_params": {**GREEDY, "ignore_eos": True}})

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(ask, prompts))
    assert [status for status, _ in answers] == [200] * 6
    assert [body["output_ids"] for _, body in answers] == [greedy_ids(parts, prompt) for prompt in prompts]
    metrics = server.app.stats.take()
    assert metrics["reward_model/genrm/requests"] == 6 and metrics["reward_model/genrm/generated_tokens"] == 36
    assert metrics["reward_model/genrm/prompt_tokens"] == sum(map(len, prompts))
    assert metrics["reward_model/genrm/serving_s"] > 0 and metrics["reward_model/genrm/errors"] == 0
    assert server.app.stats.take()["reward_model/genrm/requests"] == 0  # taken: reset


def test_close_stops_every_thread_and_frees_the_port(parts):
    before = {thread.ident for thread in threading.enumerate()}
    server = start(parts)
    address = server.address
    assert call(address, "POST", "/generate", {"input_ids": [5, 6], "sampling_params": GREEDY})[0] == 200
    server.close()
    server.close()  # twice is fine
    left = [thread.name for thread in threading.enumerate()
            if thread.ident not in before and thread.name.startswith(THREAD_PREFIXES)]
    assert left == []
    host, port = address.split(":")
    with pytest.raises(ConnectionRefusedError):
        http.client.HTTPConnection(host, int(port), timeout=5).connect()


def test_the_hybrid_engine_serves_requests_at_once_across_a_sleep(tiny_model_dir, parts):
    """The GPU path's engine (LLMEngine and its asyncio front end), here on the CPU: requests sent together are
    generated together and match the engine's batch call; freeing and re-allocating the KV cache between steps
    (free_cache_engine) leaves it serving."""
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    tokenizer = parts[1]
    engine = LLMEngine(load_causal_lm(tiny_model_dir), device="cpu", num_kv_blocks=64, block_size=4)
    prompts = [tokenizer(f"{a}*{a}=")["input_ids"] for a in range(5)]
    params = SamplingParams(do_sample=False, temperature=0.0, max_new_tokens=6, ignore_eos=True)
    expected = engine.generate(prompts, params).token_ids
    app = GenerateApp(engine.request_engine(), tokenizer, "tiny-genrm", 64, parts[2])
    server = GenerateServer(app, ServeLimits(workers=8)).start()
    try:
        def ask(prompt):
            return call(server.address, "POST", "/generate",
                        {"input_ids": prompt, "sampling_params": {**GREEDY, "ignore_eos": True}})[1]["output_ids"]

        for _ in range(2):
            with ThreadPoolExecutor(5) as pool:
                assert list(pool.map(ask, prompts)) == expected
            app.abort_all()
            engine.sleep()
            engine.wake_up()
    finally:
        server.close()


def test_requests_spread_over_replicas(tiny_model_dir, parts):
    """Two engine replicas (one per device on a GPU): requests sent together go to the less busy one, and each
    answer is its own prompt's."""
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    tokenizer = parts[1]
    model = load_causal_lm(tiny_model_dir)
    engines = [LLMEngine(model, device="cpu", num_kv_blocks=64, block_size=4) for _ in range(2)]
    prompts = [tokenizer(f"{a}-{a}=")["input_ids"] for a in range(6)]
    params = SamplingParams(do_sample=False, temperature=0.0, max_new_tokens=6, ignore_eos=True)
    expected = LLMEngine(model, device="cpu", num_kv_blocks=64, block_size=4).generate(prompts, params).token_ids
    app = GenerateApp([engine.request_engine() for engine in engines], tokenizer, "tiny-genrm", 64, parts[2])
    server = GenerateServer(app, ServeLimits(workers=8)).start()
    try:
        status, body = call(server.address, "POST", "/generate",
                            {"input_ids": prompts, "sampling_params": {**GREEDY, "ignore_eos": True}})
        assert status == 200 and [answer["output_ids"] for answer in body] == expected
        prefilled = [engine.take_metrics()["rollout/prefill_tokens"] for engine in engines]
        assert min(prefilled) > 0 and sum(prefilled) == sum(map(len, prompts)), prefilled  # both served, none twice
    finally:
        server.close()
