"""`PoolingClient`: per-token scores from a vLLM-style `/pooling` server, with retries and bounded concurrency.

The bearer token is read only from the environment variable named by `token_env`; it never appears
in errors, logs or `repr`.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.parse
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from hybridrl.serving.protocol import parse_pooling_response

MAX_ERROR_CHARS = 300


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
    """Client of `POST {base_url}/pooling`; `pool` splits its inputs into batches sent concurrently."""

    def __init__(self, base_url: str, *, token_env: str = "HYBRIDRL_REMOTE_TOKEN", timeout_s: float = 30.0,
                 max_retries: int = 3, backoff_s: float = 0.5, max_concurrency: int = 4, batch_size: int = 32,
                 model: str | None = None):
        parts = urllib.parse.urlsplit(base_url)
        shown = redact_url(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"remote scoring URL {shown!r} must look like http://host:port")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError(f"remote scoring URL {shown} must not carry credentials, a query or a fragment; "
                             f"put the token in the environment variable {token_env}")
        if max_retries < 0 or max_concurrency < 1 or batch_size < 1 or timeout_s <= 0 or backoff_s < 0:
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

    def __repr__(self) -> str:
        auth = f"token from ${self.token_env}" if self._token else "no token"
        return f"PoolingClient({self.base_url!r}, {auth})"

    def pool(self, token_ids: list[list[int]]) -> list[list[float]]:
        """Per-token scalar outputs, one list per input sequence and as long as it."""
        rows = _validate_token_ids(token_ids)
        batches = [rows[i:i + self.batch_size] for i in range(0, len(rows), self.batch_size)]
        if len(batches) <= 1:
            return [out for batch in batches for out in self._pool_batch(batch)]
        executor = ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(batches)),
                                      thread_name_prefix="hybridrl-pooling")
        futures: list[Future] = [executor.submit(self._pool_batch, batch) for batch in batches]
        try:
            return [out for future in futures for out in future.result()]
        finally:
            for future in futures:  # after a failure: don't start batches that are still queued
                future.cancel()
            executor.shutdown(wait=True)

    def health(self) -> None:
        """Raise `RemoteScoringError` unless `GET /health` answers 200 (one attempt)."""
        try:
            status, data = self._send("GET", "/health", None)
        except (OSError, http.client.HTTPException) as err:
            raise RemoteScoringError(f"GET {self.base_url}/health failed: {self._clean(repr(err))}; is the "
                                     f"server running (hybridrl serve --model DIR --port N)?") from err
        if status != 200:
            raise RemoteScoringError(f"GET {self.base_url}/health answered HTTP {status}: {self._snippet(data)}")

    def _pool_batch(self, batch: list[list[int]]) -> list[list[float]]:
        payload: dict[str, Any] = {"input": batch, "encoding_format": "float"}
        if self.model is not None:
            payload["model"] = self.model
        status, data = self._post_with_retries(json.dumps(payload).encode())
        try:
            answer = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise RemoteScoringError(f"POST {self.endpoint} answered HTTP {status} with a body that is not JSON: "
                                     f"{self._snippet(data)}") from err
        try:
            return parse_pooling_response(answer, [len(row) for row in batch])
        except ValueError as err:
            raise RemoteScoringError(f"POST {self.endpoint} answered HTTP {status} with an unusable pooling "
                                     f"response: {self._clean(str(err))}") from err

    def _post_with_retries(self, body: bytes) -> tuple[int, bytes]:
        """(status, body) of the first 2xx answer; 4xx raises at once; errors/5xx/timeouts are retried."""
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            try:
                status, data = self._send("POST", "/pooling", body)
            except (OSError, http.client.HTTPException) as err:  # refused, reset, timed out, broken response
                last = f"{type(err).__name__}: {self._clean(str(err))}"
            else:
                if status < 300:
                    return status, data
                if status < 500:
                    raise RemoteScoringError(self._client_error(status, data))
                last = f"HTTP {status}: {self._snippet(data)}"
            if attempt + 1 < attempts:
                time.sleep(self.backoff_s * 2 ** attempt)
        raise RemoteScoringError(f"POST {self.endpoint} failed after {attempts} attempt(s); last error: {last}. "
                                 f"Is the scoring server running and reachable (hybridrl serve --model DIR --port N)?")

    def _client_error(self, status: int, data: bytes) -> str:
        hint = {401: f" Set {self.token_env} to the server's HYBRIDRL_SERVE_TOKEN.",
                404: " Check the URL (it should be the server's base, e.g. http://host:port)."}.get(status, "")
        return f"POST {self.endpoint} answered HTTP {status} (not retried): {self._snippet(data)}.{hint}"

    def _send(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        parts = self._parts
        conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = conn_cls(parts.hostname, parts.port, timeout=self.timeout_s)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        try:
            conn.request(method, parts.path.rstrip("/") + path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

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
