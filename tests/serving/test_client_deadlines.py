"""PoolingClient against loopback servers that misbehave: a total deadline per request however the answer
trickles in, retries with backoff and a log line each, a stopped server named with what to check, and the
reward_model.remote / critic.remote keys reaching the clients."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from hybridrl.config import load_config
from hybridrl.serving import PoolingClient, RemoteScoringError
from tests.serving.helpers import RawServer, StubServer, ok_response, read_request, reset, running

KEY = "reward_model.remote"


def _trickle(sock: socket.socket, number: int) -> None:
    """Read the request, then answer one byte every 0.2 s: each read succeeds well within any socket timeout,
    so only a deadline over the whole request stops the client (the answer would take 40 s)."""
    read_request(sock)
    body = json.dumps({"object": "list", "data": [{"index": 0, "data": [[0.5]]}]}).encode()
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    for byte in answer.ljust(200, b" "):
        sock.sendall(bytes([byte]))
        time.sleep(0.2)


def test_a_trickling_server_is_cut_at_the_total_deadline():
    server = RawServer(_trickle)
    with running(server) as url:
        client = PoolingClient(url, timeout_s=1.0, max_retries=1, backoff_s=0.01, config_key=KEY)
        with pytest.raises(RemoteScoringError) as error:
            client.pool([[1]])
        assert server.client_gone.wait(timeout=10), "the server never saw the client hang up"
    message = str(error.value)
    assert "after 2 attempt(s)" in message
    assert f"no complete answer within {KEY}.timeout_s=1 s" in message
    assert server.num_connections == 2


def test_each_retry_is_logged_with_endpoint_attempt_and_cause(caplog):
    flaky = StubServer(lambda n, body: (500, b'{"error": {"message": "worker crashed"}}') if n < 2 else ok_response(body))
    with running(flaky) as url:
        assert PoolingClient(url, max_retries=3, backoff_s=0.01, timeout_s=5, config_key=KEY).pool([[1, 2]]) == [[0.5] * 2]
    retries = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert len(retries) == 2
    assert f"POST {url}/pooling attempt 1/4 failed (HTTP 500: worker crashed)" in retries[0]
    assert "attempt 2/4" in retries[1]


def test_resets_and_busy_answers_are_retried_other_4xx_are_not():
    resets = RawServer(lambda sock, n: (read_request(sock), reset(sock)))
    with running(resets) as url:
        with pytest.raises(RemoteScoringError, match="after 3 attempt.*the server (reset the connection|closed the "
                                                     "connection without answering)"):
            PoolingClient(url, max_retries=2, backoff_s=0.01, timeout_s=5).pool([[1]])
    assert resets.num_connections == 3
    busy = StubServer(lambda n, body: (429, b"slow down") if n == 0 else ok_response(body))
    with running(busy) as url:
        assert PoolingClient(url, max_retries=1, backoff_s=0.01, timeout_s=5).pool([[1]]) == [[0.5]]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_stopped_server_is_named_with_what_to_check(caplog):
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    with pytest.raises(RemoteScoringError) as error:
        PoolingClient(url, max_retries=2, backoff_s=0.01, timeout_s=5, config_key=KEY).pool([[1]])
    message = str(error.value)
    for needle in (f"POST {url}/pooling failed after 3 attempt(s)", "connection refused: nothing listens at 127.0.0.1",
                   f"curl {url}/health", "hybridrl serve", f"{KEY}.timeout_s=5", f"{KEY}.max_retries=2"):
        assert needle in message, needle
    assert len([r for r in caplog.records if "connection refused" in r.getMessage()]) == 2  # one line per retry


def test_one_failed_batch_cuts_the_others_instead_of_waiting_for_them():
    """Batch 0 is refused (400) while batch 1 stalls for a minute: pool() raises the 400 without waiting."""
    stalling = threading.Event()

    def behave(sock: socket.socket, number: int) -> None:
        request = read_request(sock)
        first_row = json.loads(request.partition(b"\r\n\r\n")[2])["input"][0][0]
        if first_row == 0:
            stalling.wait(timeout=30)  # refuse once batch 1 is in flight, so there is a request to cut
            sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n\r\nbad input 0")
            return
        stalling.set()
        sock.settimeout(0.1)
        for _ in range(600):  # a minute, unless the client hangs up first
            try:
                if sock.recv(1) == b"":
                    raise ConnectionResetError("the client hung up")
            except socket.timeout:
                continue

    server = RawServer(behave)
    with running(server) as url:
        with pytest.raises(RemoteScoringError, match="HTTP 400 .not retried.: bad input 0"):
            PoolingClient(url, batch_size=1, max_concurrency=2, timeout_s=120, max_retries=0).pool([[0], [1]])
        assert server.client_gone.wait(timeout=10), "the stalled request was not cut"


def test_config_keys_reach_the_remote_reward_model_and_critic():
    from hybridrl.workers.launch import build_remote_critic
    from hybridrl.workers.reward import build_reward_model

    cfg = load_config(["critic.type=vllm_api", "critic.model.path=http://127.0.0.1:9", "critic.remote.timeout_s=7",
                       "critic.remote.max_retries=0", "reward_model.enable=true", "reward_model.type=vllm_api",
                       "reward_model.model.path=http://127.0.0.1:9", "reward_model.remote.backoff_s=0.25"])
    critic = build_remote_critic(cfg).client
    assert (critic.timeout_s, critic.max_retries, critic.config_key) == (7.0, 0, "critic.remote")
    reward = build_reward_model(cfg, tokenizer=None).client
    assert (reward.timeout_s, reward.backoff_s, reward.config_key) == (60.0, 0.25, "reward_model.remote")


def test_a_server_that_accepts_and_never_answers_is_cut_at_the_deadline():
    def stall(sock: socket.socket, number: int) -> None:
        read_request(sock)
        while sock.recv(1):  # until the client hangs up (bounded by the client's deadline)
            pass
        raise ConnectionResetError("the client hung up")

    server = RawServer(stall)
    with running(server) as url:
        with pytest.raises(RemoteScoringError, match=rf"after 2 attempt.*within {KEY}.timeout_s=0.5 s"):
            PoolingClient(url, timeout_s=0.5, max_retries=1, backoff_s=0.01, config_key=KEY).pool([[1]])
        assert server.client_gone.wait(timeout=10)


def test_a_socket_timeout_that_beats_the_deadline_timer_is_reported_as_the_deadline(monkeypatch):
    """On a loaded machine the socket's own timeout (timeout_s without progress) can fire before the deadline
    timer's thread runs: the error names the deadline all the same."""
    class LateTimer(threading.Timer):
        def start(self) -> None:  # never fires: only the socket timeout ends the request
            pass

    def stall(sock: socket.socket, number: int) -> None:
        read_request(sock)
        while sock.recv(1):
            pass
        raise ConnectionResetError("the client hung up")

    monkeypatch.setattr(threading, "Timer", LateTimer)
    with running(RawServer(stall)) as url:
        with pytest.raises(RemoteScoringError, match=rf"after 1 attempt.*within {KEY}.timeout_s=0.3 s"):
            PoolingClient(url, timeout_s=0.3, max_retries=0, config_key=KEY).pool([[1]])
