"""`PoolingClient`: per-token scores from a vLLM-style `/pooling` server, with retries and bounded concurrency.

Every request has a total deadline, `timeout_s`: when it passes, the connection is shut down whatever it
is doing (connecting, sending, waiting, reading), so a server that trickles its answer a byte at a time
cannot hold the client past it (a socket timeout alone bounds each read, not the request). Failed
requests (connection errors, the deadline, HTTP 5xx/408/429) are retried `max_retries` times, waiting
`backoff_s`, then twice that, ...; each retry is logged with the endpoint, the attempt and the cause.
When one batch of a `pool()` call fails, or the caller is interrupted (Ctrl-C), its other requests are
cut at once rather than waited for.

The bearer token is read only from the environment variable named by `token_env`; it never appears
in errors, logs or `repr`.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
import urllib.parse
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from hybridrl.logging.log import get_logger
from hybridrl.serving.protocol import parse_pooling_response

MAX_ERROR_CHARS = 300
RETRIED_STATUSES = (408, 429)  # and every 5xx
log = get_logger("serving")


class RequestDeadlineError(TimeoutError):
    """A request did not complete within the client's total deadline (its connection was shut down)."""


class _Requests:
    """The requests of one `pool()` call in flight: `cancel()` shuts all their connections down at once."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self._cuts: set[Callable[[], None]] = set()
        self._lock = threading.Lock()

    def add(self, cut: Callable[[], None]) -> None:
        with self._lock:
            self._cuts.add(cut)
        if self.cancelled.is_set():
            cut()

    def discard(self, cut: Callable[[], None]) -> None:
        with self._lock:
            self._cuts.discard(cut)

    def cancel(self) -> None:
        self.cancelled.set()
        with self._lock:
            cuts = list(self._cuts)
        for cut in cuts:
            cut()


class RemoteScoringError(RuntimeError):
    """A remote scoring server could not be reached after retries, refused the request or answered garbage."""


def redact_url(url: str) -> str:
    """`url` without user:password, query or fragment (they may carry credentials)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    if "@" in parts.netloc:
        netloc = "***@" + netloc
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _validate_token_ids(token_ids: Any) -> list[list[int]]:
    if not isinstance(token_ids, list):
        raise TypeError(f"pool() takes a list of token-id lists, got {type(token_ids).__name__}")
    for index, row in enumerate(token_ids):
        if not isinstance(row, list) or not row or not all(isinstance(t, int) for t in row):
            raise ValueError(f"token_ids[{index}] must be a non-empty list of ints "
                             f"(send the valid tokens only, no padding)")
    return token_ids


class PoolingClient:
    """Client of `POST {base_url}/pooling`; `pool` splits its inputs into batches sent concurrently.

    `config_key`: the config section the deadline and retries come from (e.g. `reward_model.remote`), named
    in errors so the user knows which keys to change."""

    def __init__(self, base_url: str, *, token_env: str = "HYBRIDRL_REMOTE_TOKEN", timeout_s: float = 60.0,
                 max_retries: int = 3, backoff_s: float = 1.0, max_concurrency: int = 4, batch_size: int = 32,
                 model: str | None = None, config_key: str | None = None):
        parts = urllib.parse.urlsplit(base_url)
        shown = redact_url(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"remote scoring URL {shown!r} must look like http://host:port")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError(f"remote scoring URL {shown} must not carry credentials, a query or a fragment; "
                             f"put the token in the environment variable {token_env}")
        if max_retries < 0 or max_concurrency < 1 or batch_size < 1 or not timeout_s > 0 or not backoff_s >= 0:
            raise ValueError(f"PoolingClient needs max_retries >= 0, max_concurrency >= 1, batch_size >= 1, "
                             f"timeout_s > 0 and backoff_s >= 0; got {max_retries}, {max_concurrency}, "
                             f"{batch_size}, {timeout_s}, {backoff_s}")
        self.base_url = shown.rstrip("/")
        self.endpoint = self.base_url + "/pooling"
        self._parts = parts
        self._token = os.environ.get(token_env) or None
        self.token_env = token_env
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.max_concurrency, self.batch_size, self.model = max_concurrency, batch_size, model
        self.config_key = config_key

    def __repr__(self) -> str:
        auth = f"token from ${self.token_env}" if self._token else "no token"
        return f"PoolingClient({self.base_url!r}, {auth})"

    def pool(self, token_ids: list[list[int]]) -> list[list[float]]:
        """Per-token scalar outputs, one list per input sequence and as long as it."""
        rows = _validate_token_ids(token_ids)
        batches = [rows[i:i + self.batch_size] for i in range(0, len(rows), self.batch_size)]
        requests = _Requests()
        if len(batches) <= 1:
            try:
                return [out for batch in batches for out in self._pool_batch(batch, requests)]
            except BaseException:
                requests.cancel()
                raise
        executor = ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(batches)),
                                      thread_name_prefix="hybridrl-pooling")
        futures: list[Future] = [executor.submit(self._pool_batch, batch, requests) for batch in batches]
        try:
            return [out for future in futures for out in future.result()]
        except BaseException:
            requests.cancel()  # a failed batch or Ctrl-C: the others are cut now, not waited for
            raise
        finally:
            for future in futures:  # don't start batches that are still queued
                future.cancel()
            executor.shutdown(wait=True)

    def health(self) -> None:
        """Raise `RemoteScoringError` unless `GET /health` answers 200 (one attempt)."""
        try:
            status, data = self._send("GET", "/health", None, _Requests())
        except (OSError, http.client.HTTPException) as err:
            raise RemoteScoringError(f"GET {self.base_url}/health failed: {self._cause(err)}. "
                                     f"{self._what_to_check()}") from err
        if status != 200:
            raise RemoteScoringError(f"GET {self.base_url}/health answered HTTP {status}: {self._snippet(data)}")

    def _pool_batch(self, batch: list[list[int]], requests: _Requests) -> list[list[float]]:
        payload: dict[str, Any] = {"input": batch, "encoding_format": "float"}
        if self.model is not None:
            payload["model"] = self.model
        status, data = self._post_with_retries(json.dumps(payload).encode(), requests)
        try:
            answer = json.loads(data)
        except (UnicodeDecodeError, ValueError, RecursionError) as err:
            raise RemoteScoringError(f"POST {self.endpoint} answered HTTP {status} with a body that is not JSON: "
                                     f"{self._snippet(data)}") from err
        try:
            return parse_pooling_response(answer, [len(row) for row in batch])
        except ValueError as err:
            raise RemoteScoringError(f"POST {self.endpoint} answered HTTP {status} with an unusable pooling "
                                     f"response: {self._clean(str(err))}") from err

    def _post_with_retries(self, body: bytes, requests: _Requests) -> tuple[int, bytes]:
        """(status, body) of the first 2xx answer; other 4xx raise at once; errors, the deadline, 5xx, 408 and
        429 are retried with exponential backoff, each retry logged."""
        attempts, started = self.max_retries + 1, time.monotonic()
        for attempt in range(1, attempts + 1):
            try:
                status, data = self._send("POST", "/pooling", body, requests)
            except (OSError, http.client.HTTPException) as err:  # refused, reset, deadline, broken response
                cause = self._cause(err)
            else:
                if status < 300:
                    return status, data
                if status < 500 and status not in RETRIED_STATUSES:
                    raise RemoteScoringError(self._client_error(status, data))
                cause = f"HTTP {status}: {self._snippet(data)}"
            if requests.cancelled.is_set():
                raise RemoteScoringError(f"POST {self.endpoint} was cut: another request of the same batch failed")
            if attempt < attempts:
                wait = self.backoff_s * 2 ** (attempt - 1)
                log.warning("remote scoring: POST %s attempt %d/%d failed (%s); retrying in %.1f s",
                            self.endpoint, attempt, attempts, cause, wait)
                if requests.cancelled.wait(wait):
                    raise RemoteScoringError(f"POST {self.endpoint} was cut: another request of the same batch failed")
        raise RemoteScoringError(f"POST {self.endpoint} failed after {attempts} attempt(s) in "
                                 f"{time.monotonic() - started:.1f} s; last error: {cause}. {self._what_to_check()}")

    def _what_to_check(self) -> str:
        keys = self.config_key or "PoolingClient"
        return (f"Check that the scoring server is running and reachable from this machine (curl "
                f"{self.base_url}/health; start one with `hybridrl serve --model DIR --port N`). Deadline and "
                f"retries: {keys}.timeout_s={self.timeout_s:g}, {keys}.max_retries={self.max_retries}, "
                f"{keys}.backoff_s={self.backoff_s:g}")

    def _cause(self, err: BaseException) -> str:
        host = f"{self._parts.hostname}:{self._parts.port or ''}".rstrip(":")
        if isinstance(err, RequestDeadlineError):
            return str(err)
        if isinstance(err, ConnectionRefusedError):
            return f"connection refused: nothing listens at {host}"
        if isinstance(err, http.client.RemoteDisconnected):
            return "the server closed the connection without answering"
        if isinstance(err, ConnectionResetError):
            return "the server reset the connection"
        if isinstance(err, socket.gaierror):
            return f"cannot resolve the host {self._parts.hostname!r} ({err})"
        return f"{type(err).__name__}: {self._clean(str(err))}"

    def _client_error(self, status: int, data: bytes) -> str:
        hint = {401: f" Set {self.token_env} to the server's HYBRIDRL_SERVE_TOKEN.",
                404: " Check the URL (it should be the server's base, e.g. http://host:port).",
                413: " Lower the batch the server gets (its --max-body-mb / --max-tokens caps it)."}.get(status, "")
        return f"POST {self.endpoint} answered HTTP {status} (not retried): {self._snippet(data)}.{hint}"

    def _send(self, method: str, path: str, body: bytes | None, requests: _Requests) -> tuple[int, bytes]:
        """One request, shut down at `timeout_s` after it starts whatever it is doing."""
        parts = self._parts
        conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = conn_cls(parts.hostname, parts.port, timeout=self.timeout_s)
        expired = threading.Event()

        def cut() -> None:
            expired.set()
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked read or write in the requesting thread
                except OSError:
                    pass  # already closed

        timer = threading.Timer(self.timeout_s, cut)
        timer.daemon = True
        timer.start()
        requests.add(cut)
        try:
            return self._exchange(conn, method, path, body, expired)
        except (OSError, http.client.HTTPException) as err:
            # A socket timeout is timeout_s without progress, so past the deadline too (it may beat the timer).
            if (expired.is_set() or isinstance(err, TimeoutError)) and not requests.cancelled.is_set():
                raise RequestDeadlineError(
                    f"no complete answer within {self.config_key or 'PoolingClient'}.timeout_s={self.timeout_s:g} s "
                    "(the whole request: connect, send, wait and read)") from err
            raise
        finally:
            timer.cancel()
            requests.discard(cut)
            conn.close()

    def _exchange(self, conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None,
                  expired: threading.Event) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        conn.connect()
        if expired.is_set():  # the deadline passed while connecting, before there was a socket to shut down
            raise TimeoutError("the deadline passed while connecting")
        conn.request(method, self._parts.path.rstrip("/") + path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()

    def _clean(self, text: str) -> str:
        return text.replace(self._token, "***") if self._token else text

    def _snippet(self, data: bytes) -> str:
        text = data.decode("utf-8", errors="replace").strip()
        try:
            error = json.loads(text).get("error")
            text = error.get("message", text) if isinstance(error, dict) else text
        except (json.JSONDecodeError, AttributeError):
            pass  # not a JSON error object: show the raw text
        text = self._clean(text)
        return text[:MAX_ERROR_CHARS] + ("…" if len(text) > MAX_ERROR_CHARS else "") if text else "(empty body)"
