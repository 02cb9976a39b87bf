"""`hybridrl serve` + `PoolingClient` on loopback: round trip, auth, retries, garbage, concurrency."""

from __future__ import annotations

import http.client
import json

import pytest
import torch

from hybridrl.models.hf import load_tokenizer, load_value_model
from hybridrl.serving import PoolingClient, RemoteScoringError
from hybridrl.serving.scorer import TokenScorer
from hybridrl.serving.server import TOKEN_ENV, serve
from tests.serving.helpers import LOOPBACK, StubServer, ok_response, running, save_value_model_dir, slow

SEQS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18], [19]]
FAST = dict(backoff_s=0.01, timeout_s=5.0)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return save_value_model_dir(str(tmp_path_factory.mktemp("value_model")))


@pytest.fixture
def server_url(model_dir, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with running(serve(model_dir, LOOPBACK, 0, "value", max_batch=3)) as url:
        yield url


def _raw(url: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_round_trip_matches_in_process_model(server_url, model_dir):
    remote = PoolingClient(server_url, batch_size=2, **FAST).pool(SEQS)
    local = TokenScorer(load_value_model(model_dir), pad_id=0, max_batch=len(SEQS)).score(SEQS)
    assert [len(row) for row in remote] == [len(row) for row in SEQS]
    for got, want in zip(remote, local):
        assert torch.allclose(torch.tensor(got), torch.tensor(want), atol=1e-5)
    assert PoolingClient(server_url, **FAST).pool([]) == []


def test_string_input_is_tokenized_by_the_server(server_url, model_dir):
    text = "12+3=15"
    status, answer = _raw(server_url, "POST", "/pooling", json.dumps({"input": [text]}).encode())
    ids = load_tokenizer(model_dir)(text, add_special_tokens=True)["input_ids"]
    assert status == 200 and answer["object"] == "list" and answer["usage"]["prompt_tokens"] == len(ids)
    item = answer["data"][0]
    assert item["index"] == 0 and item["object"] == "pooling" and all(len(v) == 1 for v in item["data"])
    via_ids = PoolingClient(server_url, **FAST).pool([ids])[0]
    assert [v[0] for v in item["data"]] == pytest.approx(via_ids, abs=1e-6)


def test_health_and_models(server_url, model_dir):
    assert _raw(server_url, "GET", "/health") == (200, {"status": "ok"})
    status, models = _raw(server_url, "GET", "/v1/models")
    assert status == 200 and models["data"][0]["id"] == model_dir and models["data"][0]["hybridrl_kind"] == "value"
    PoolingClient(server_url, **FAST).health()


@pytest.mark.parametrize("body, status, phrase", [
    (b"{not json", 400, "not valid JSON"),
    (b'{"model": "x"}', 404, "does not exist"),
    (b'{"inputs": [[1]]}', 400, "unsupported field"),
    (b'{"input": []}', 400, "non-empty"),
    (b'{"input": [[1, 99999]]}', 400, "input[0][1]"),
    (b'{"input": [[1], "text"]}', 400, "input[1]"),
    (b'{"input": [[1]], "encoding_format": "base64"}', 400, "encoding_format"),
])
def test_malformed_requests_get_400_with_a_json_message(server_url, body, status, phrase):
    got_status, answer = _raw(server_url, "POST", "/pooling", body, {"Content-Type": "application/json"})
    assert got_status == status and phrase in answer["error"]["message"]


def test_auth_token_from_env_required_and_never_leaked(model_dir, monkeypatch):
    secret, wrong = "s3cret-serve-token", "wrong-client-token"
    monkeypatch.setenv(TOKEN_ENV, secret)
    with running(serve(model_dir, LOOPBACK, 0, "reward")) as url:
        monkeypatch.setenv("MY_RM_TOKEN", wrong)
        for client in (PoolingClient(url, token_env="UNSET_TOKEN_ENV", **FAST),
                       PoolingClient(url, token_env="MY_RM_TOKEN", **FAST)):
            with pytest.raises(RemoteScoringError, match="HTTP 401") as err:
                client.pool(SEQS[:1])
            assert secret not in str(err.value) and wrong not in str(err.value) and url in str(err.value)
            assert wrong not in repr(client)
        assert _raw(url, "GET", "/health")[0] == 200  # health stays open for probes
        assert _raw(url, "GET", "/v1/models")[0] == 401
        monkeypatch.setenv("MY_RM_TOKEN", secret)
        assert len(PoolingClient(url, token_env="MY_RM_TOKEN", **FAST).pool(SEQS)) == len(SEQS)


def test_server_stopped_mid_use_retries_then_names_the_url(model_dir, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with running(serve(model_dir, LOOPBACK, 0, "value")) as url:
        client = PoolingClient(url, max_retries=2, backoff_s=0.01, timeout_s=2.0)
        assert len(client.pool(SEQS)) == len(SEQS)
    with pytest.raises(RemoteScoringError, match="after 3 attempt") as err:
        client.pool(SEQS)
    assert f"{url}/pooling" in str(err.value)


def test_credentials_in_the_url_are_refused_and_redacted():
    with pytest.raises(ValueError, match="must not carry credentials") as err:
        PoolingClient("http://user:hunter2@127.0.0.1:1/")
    assert "hunter2" not in str(err.value)
    with pytest.raises(ValueError, match="http://host:port"):
        PoolingClient("127.0.0.1:8000")


def _garbage(payload: bytes):
    return lambda number, body: (200, payload)


def _items(rows: list) -> bytes:
    return json.dumps({"data": [{"index": i, "data": row} for i, row in enumerate(rows)]}).encode()


@pytest.mark.parametrize("respond, phrase", [
    (_garbage(b"<html>oops</html>"), "not JSON"),
    (_garbage(b'{"result": []}'), "'data' list"),
    (_garbage(_items([[[0.1], [0.2]]])), "1 items for 2 inputs"),
    (_garbage(_items([[[0.1]], [[0.2], [0.3], [0.4]]])), "expected one per token"),
    (_garbage(_items([[[0.1], [0.2]], [[0.1, 0.2], [0.3]]])), "1-element list"),
    (_garbage(_items([[[0.1], ["x"]], [[0.3], [0.4]]])), "expected a number"),
    (_garbage(_items([[[0.1], [float("nan")]], [[0.3], [0.4]]])), "not finite"),
    (_garbage(json.dumps({"data": [{"index": 0, "data": [[1], [2]]}] * 2}).encode()), "duplicate"),
])
def test_garbage_answers_are_rejected(respond, phrase):
    with running(StubServer(respond)) as url:
        with pytest.raises(RemoteScoringError, match=phrase) as err:
            PoolingClient(url, **FAST).pool([[1, 2], [3, 4]])
    assert f"{url}/pooling" in str(err.value)


def test_flat_per_token_lists_are_accepted():
    flat = lambda number, body: (200, _items([[0.25] * len(row) for row in body["input"]]))  # noqa: E731
    with running(StubServer(flat)) as url:
        assert PoolingClient(url, **FAST).pool([[1, 2, 3]]) == [[0.25, 0.25, 0.25]]


def test_5xx_and_timeouts_are_retried_4xx_is_not():
    flaky = lambda n, body: (503, b'{"error": {"message": "warming up"}}') if n < 2 else ok_response(body)  # noqa: E731
    with running(StubServer(flaky)) as url:
        assert PoolingClient(url, max_retries=3, **FAST).pool([[1, 2]]) == [[0.5, 0.5]]
    stalls_once = StubServer(lambda n, body: slow(1.0 if n == 0 else 0.0, lambda _, b: ok_response(b))(n, body))
    with running(stalls_once) as url:
        assert PoolingClient(url, max_retries=1, backoff_s=0.01, timeout_s=0.3).pool([[1]]) == [[0.5]]
    assert stalls_once.num_requests == 2
    refuse = StubServer(lambda n, body: (400, b'{"error": {"message": "bad input"}}'))
    with running(refuse) as url:
        with pytest.raises(RemoteScoringError, match="HTTP 400 .not retried.: bad input"):
            PoolingClient(url, max_retries=3, **FAST).pool([[1]])
    assert refuse.num_requests == 1


def test_retries_are_bounded_on_persistent_5xx():
    broken = StubServer(lambda n, body: (500, b"internal"))
    with running(broken) as url:
        with pytest.raises(RemoteScoringError, match="after 3 attempt.*HTTP 500: internal"):
            PoolingClient(url, max_retries=2, **FAST).pool([[1]])
    assert broken.num_requests == 3


def test_concurrency_limit_is_respected_and_order_kept():
    def by_first_token(number: int, body: dict) -> tuple[int, bytes]:
        return 200, _items([[float(row[0])] * len(row) for row in body["input"]])
    stub = StubServer(slow(0.05, by_first_token), hold_until_in_flight=2)
    rows = [[i, i + 1] for i in range(8)]
    with running(stub) as url:
        out = PoolingClient(url, batch_size=1, max_concurrency=2, **FAST).pool(rows)
    assert out == [[float(i)] * 2 for i in range(8)]
    assert stub.num_requests == 8 and stub.max_in_flight == 2


@pytest.mark.slow  # a child interpreter importing torch + transformers: ~10-20 s on a loaded 2-core box
def test_main_serve_command_line(model_dir, tmp_path):
    """`main_serve` in a child process: the log line names the bound URL, /health answers, SIGTERM stops it."""
    import os
    import queue
    import re
    import subprocess
    import sys
    import threading

    code = "import sys; from hybridrl.serving.server import main_serve; sys.exit(main_serve(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    env.pop(TOKEN_ENV, None)
    proc = subprocess.Popen([sys.executable, "-c", code, "--model", model_dir, "--port", "0", "--kind", "value"],
                            stderr=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
    try:
        for _ in range(50):  # bounded: the server logs its URL once it is listening
            match = re.search(r"at (http://127\.0\.0\.1:\d+)", lines.get(timeout=60))
            if match:
                break
        assert match, "main_serve never logged its URL"
        assert _raw(match.group(1), "GET", "/health")[0] == 200
        assert len(PoolingClient(match.group(1), **FAST).pool(SEQS[:2])) == 2
    finally:
        proc.terminate()
        proc.wait(timeout=30)
