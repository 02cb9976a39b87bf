"""`hybridrl serve`'s limits, one at a time, on loopback: each refusal is a JSON error with the right status,
slow clients are cut off without holding the handlers, and the server answers normally afterwards."""

from __future__ import annotations

import json
import socket
import time

import pytest

from hybridrl.serving import PoolingClient
from hybridrl.serving.limits import ServeLimits
from hybridrl.serving.server import TOKEN_ENV, serve
from tests.serving.helpers import LOOPBACK, post, raw_exchange, read_all, parse_answer, running, save_value_model_dir

POSITIONS = 64
LIMITS = ServeLimits(max_body_bytes=64 * 1024, max_tokens=300, max_inflight_bytes=96 * 1024, max_head_bytes=4096,
                     max_connections=16, workers=1, request_timeout_s=1.0)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return save_value_model_dir(str(tmp_path_factory.mktemp("value_model")), max_position_embeddings=POSITIONS)


@pytest.fixture
def url(model_dir, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with running(serve(model_dir, LOOPBACK, 0, "value", limits=LIMITS)) as base:
        yield base
        assert PoolingClient(base, timeout_s=10).pool([[5, 6, 7]])[0], "the server no longer answers"


def _pooling(rows) -> bytes:
    return post("/pooling", json.dumps({"input": rows}).encode())


def test_a_body_over_the_cap_gets_413_even_while_it_is_still_being_sent(url):
    status, answer = raw_exchange(url, post("/pooling", b"[" * (2 << 20)))
    assert status == 413 and "at most 65536" in answer["error"]["message"]


@pytest.mark.parametrize("rows, status, phrase", [
    ([[5] * 60] * 6, 413, "360 tokens in one request; this server takes at most 300"),
    ([[5] * 10, [6] * (POSITIONS + 1)], 400, f"input[1] has {POSITIONS + 1} tokens; this server scores at most {POSITIONS}"),
])
def test_tokens_per_request_and_the_models_positions_are_capped(url, rows, status, phrase):
    got, answer = raw_exchange(url, _pooling(rows))
    assert got == status and phrase in answer["error"]["message"]


@pytest.mark.parametrize("body, phrase", [
    (b"[" * 30_000 + b"]" * 30_000, "nests JSON too deeply"),
    (b'{"input": [[' + b"7" * 5000 + b"]]}", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"", "has no body"),
])
def test_bodies_that_break_parsers_get_400(url, body, phrase):
    status, answer = raw_exchange(url, post("/pooling", body))
    assert status == 400 and phrase in answer["error"]["message"]


@pytest.mark.parametrize("request_bytes, status, phrase", [
    (b"POST /pooling HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 5000 + b"\r\n\r\n", 431, "exceed 4096 bytes"),
    (b"POST /pooling HTTP/1.1\r\nHost: x\r\n\r\n", 411, "Content-Length"),
    (b"POST /pooling HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 411, "chunked"),
    (b"POST /pooling HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, "exactly one Content-Length"),
    (b"BREW /pot HTCPCP/1.0\r\n\r\n", 400, "version"),
    (b"\n\x93junk\r\n\r\n", 400, "request line is empty"),  # random junk starting with a newline
    (b" \t\r\nGET /health HTTP/1.1\r\n\r\n", 400, "request line is empty"),
])
def test_malformed_heads_get_json_refusals(url, request_bytes, status, phrase):
    got, answer = raw_exchange(url, request_bytes)
    assert got == status and phrase in answer["error"]["message"]


def _slow_client(url: str, sent: bytes = b"POST /pooling HTTP/1.1\r\nContent-Le") -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(sent)
    return sock


def test_slow_clients_neither_hold_the_handler_nor_stay_past_the_deadline(url):
    """One handler thread, twelve clients that stop half-way through their head, each allowed 1 s: a normal
    request is answered within 5 s (a handler thread held by each slow client in turn would take 12 s), and
    each slow client then gets 408."""
    slow = [_slow_client(url) for _ in range(12)]
    try:
        assert PoolingClient(url, timeout_s=5, max_retries=0).pool([[5, 6]])[0]
        for sock in slow:
            status, answer = parse_answer(read_all(sock))
            assert status == 408 and "did not arrive within 1 s" in answer["error"]["message"]
    finally:
        for sock in slow:
            sock.close()


def test_connections_over_the_limit_get_503_at_once(url):
    held = [_slow_client(url, b"") for _ in range(LIMITS.max_connections)]
    try:
        deadline = time.monotonic() + 10
        status, answer = 0, {}
        while status != 503 and time.monotonic() < deadline:  # the front may not have accepted them all yet
            status, answer = raw_exchange(url, _pooling([[5]]))
        assert status == 503 and "16 connections open" in answer["error"]["message"]
    finally:
        for sock in held:
            sock.close()


def test_bodies_in_flight_share_the_memory_budget(url):
    """A client that sends 60 KiB of a 64 KiB body holds 64 KiB of the 96 KiB budget: a second 40 KiB body waits
    for room, and gets it when the first is cut off at its deadline."""
    stalled = _slow_client(url, post("/pooling", b" " * 64 * 1024)[:-4096])
    try:
        padding = b" " * (40 * 1024)
        status, answer = raw_exchange(url, post("/pooling", json.dumps({"input": [[5, 6]]}).encode() + padding))
        assert status == 200 and len(answer["data"]) == 1
        assert parse_answer(read_all(stalled))[0] == 408
    finally:
        stalled.close()
