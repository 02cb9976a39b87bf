"""`hybridrl serve`: a local value/reward model behind vLLM's pooling API (`POST /pooling`, see protocol.py).

Also `GET /health` (200, no auth) and `GET /v1/models`. With env HYBRIDRL_SERVE_TOKEN set, /pooling and
/v1/models require `Authorization: Bearer <token>`.

One request cannot take the server down: the front (front.py) caps bodies, heads, connections, the time
to send a request and the memory of requests in flight; the app caps tokens per request and refuses
sequences longer than the model's positions (limits.py, docs/design.md for why the standard library's
server and not an ASGI stack).
"""

from __future__ import annotations

import argparse
import hmac
import io
import json
import os
import reprlib
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from hybridrl.logging.log import get_logger
from hybridrl.serving.front import GatedHTTPServer
from hybridrl.serving.limits import MIB, ServeLimits
from hybridrl.serving.protocol import RequestError, build_pooling_response, parse_pooling_request

TOKEN_ENV = "HYBRIDRL_SERVE_TOKEN"
KINDS = ("reward", "value")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
log = get_logger("serving")


@dataclass
class PoolingApp:
    """What the request handler needs: the scorer, the optional tokenizer, the name, the auth token and the caps
    on tokens per request (`max_tokens`) and per sequence (`max_seq_len`, the model's positions)."""
    scorer: Any  # serving.scorer.TokenScorer
    tokenizer: Any
    model_name: str
    kind: str
    token: str | None
    max_tokens: int = ServeLimits.max_tokens
    max_seq_len: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)  # one forward at a time: CPU/GPU is shared
    created: int = field(default_factory=lambda: int(time.time()))

    def token_ids(self, texts: list[str], add_special_tokens: bool) -> list[list[int]]:
        if self.tokenizer is None:
            raise RequestError("this server has no tokenizer (none in the model directory); send token ids")
        return [self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"] for text in texts]

    def pool(self, body: Any) -> bytes:
        """The JSON answer to a pooling request (built under the lock: one large answer in memory at a time)."""
        request = parse_pooling_request(body, self.model_name, self.scorer.vocab_size)
        if request.token_ids is not None:
            self.check_sizes(request.token_ids)
        with self.lock:  # the tokenizer is not safe to share between threads either
            token_ids = request.token_ids or self.token_ids(request.texts or [], request.add_special_tokens)
            self.check_sizes(token_ids)
            outputs = self.scorer.score(token_ids)
            return json.dumps(build_pooling_response(outputs, self.model_name)).encode()

    def check_sizes(self, token_ids: list[list[int]]) -> None:
        total = sum(len(row) for row in token_ids)
        if total > self.max_tokens:
            raise RequestError(f"{total} tokens in one request; this server takes at most {self.max_tokens} (its "
                               "--max-tokens); send fewer sequences per request", 413)
        for index, row in enumerate(token_ids):
            if self.max_seq_len is not None and len(row) > self.max_seq_len:
                raise RequestError(f"input[{index}] has {len(row)} tokens; this server scores at most "
                                   f"{self.max_seq_len} per sequence (the model's positions, "
                                   "max_position_embeddings, or --max-seq-len); shorten it")

    def models(self) -> dict:
        card = {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "hybridrl",
                "root": self.model_name, "parent": None, "hybridrl_kind": self.kind}
        return {"object": "list", "data": [card]}


class _SocketWriter(io.RawIOBase):
    """The handler's `wfile`: every write goes out at once (sendall, bounded by the socket's timeout)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.bytes_written = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._sock.sendall(data)
        self.bytes_written += len(data)
        return len(data)


class PoolingHandler(BaseHTTPRequestHandler):
    """One complete request (front.Request: its bytes already read) in, one JSON answer out, connection closed."""
    server_version = "hybridrl-serve"
    default_request_version = "HTTP/1.0"  # a request line it cannot parse still gets a status line and headers

    @property
    def app(self) -> PoolingApp:
        return self.server.app  # type: ignore[attr-defined]

    def setup(self) -> None:
        self.connection = self.request.sock
        self.rfile = io.BytesIO(self.request.data)
        self.wfile = _SocketWriter(self.connection)  # type: ignore[assignment]  # http.server only calls write()

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()
        if not self.wfile.bytes_written:  # http.server closes silently on a blank or all-whitespace request line
            self._error(400, "the request line is empty; send e.g. 'POST /pooling HTTP/1.1' first")

    def finish(self) -> None:
        """Nothing to flush: every write went out at once; the front closes the socket."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.debug("%s %s", self.address_string(), format % args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, an unknown method) as JSON too."""
        self._error(code, message or explain or self.responses.get(code, ("error",))[0])

    def _reply(self, status: int, payload: dict | bytes) -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        if status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
                413: "RequestTooLargeError"}.get(status, "InternalServerError" if status >= 500 else "Error")
        self._reply(status, {"error": {"message": message, "type": kind, "code": status}})

    def _authorized(self) -> bool:
        if self.app.token is None:
            return True
        given = self.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {self.app.token}".encode()):
            return True
        self._error(401, "missing or wrong 'Authorization: Bearer <token>' header (the server has "
                         f"{TOKEN_ENV} set); set the client's token environment variable to the same value")
        return False

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path == "/health":
            self._reply(200, {"status": "ok"})
        elif self.path == "/v1/models":
            if self._authorized():
                self._reply(200, self.app.models())
        else:
            self._error(404, f"no route GET {self.path}; try /health, /v1/models or POST /pooling")

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))  # checked and read by the front
        if self.path != "/pooling":
            self._error(404, f"no route POST {self.path}; this server answers POST /pooling")
        elif not raw:
            self._error(400, "the request has no body; send a JSON object with an 'input' field")
        elif self._authorized():
            try:
                body = json.loads(raw)
            except RecursionError:
                self._error(400, "the request body nests JSON too deeply; a pooling request is an object holding "
                                 "a list of token-id lists")
                return
            except ValueError as err:  # not UTF-8, not JSON, or an integer of too many digits
                self._error(400, f"the request body is not valid JSON ({reprlib.repr(str(err))})")
                return
            self._answer_pooling(body)

    def _answer_pooling(self, body: Any) -> None:
        try:
            self._reply(200, self.app.pool(body))
        except RequestError as err:
            self._error(err.status, str(err))
        except Exception as err:  # reported to the client as 500 (retryable) and logged with the traceback
            log.exception("pooling request failed")
            self._error(500, f"scoring failed: {type(err).__name__}: {err}")


def _load_app(model_path: str, kind: str, max_batch: int, device: str, limits: ServeLimits) -> PoolingApp:
    from hybridrl.models.hf import ModelLoadError, load_tokenizer, load_value_model
    from hybridrl.serving.scorer import TokenScorer

    if kind not in KINDS:
        raise ValueError(f"--kind {kind!r} is not one of {KINDS}")
    model = load_value_model(model_path, key="--model")
    try:
        tokenizer = load_tokenizer(model_path, key="--model")
    except ModelLoadError as err:
        log.warning("no tokenizer at %s (%s); string inputs will be refused, token ids work", model_path, err)
        tokenizer = None
    # Padding positions are masked out and cut from the outputs, so any id in range is fine as padding.
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    scorer = TokenScorer(model, pad_id=pad_id, max_batch=max_batch, device=device)
    return PoolingApp(scorer, tokenizer, model_name=model_path, kind=kind, token=os.environ.get(TOKEN_ENV) or None,
                      max_tokens=limits.max_tokens, max_seq_len=_max_seq_len(model.config, limits.max_seq_len))


def _max_seq_len(config: Any, asked: int | None) -> int | None:
    """The longest sequence to score: the model's positions (a longer one would index past its position
    embeddings or score garbage), or `asked` when it is lower."""
    positions = getattr(config, "max_position_embeddings", None)
    if asked is not None and positions is not None and asked > positions:
        raise ValueError(f"--max-seq-len {asked} is more than the model's {positions} positions "
                         "(max_position_embeddings); leave it unset or lower it")
    return asked if asked is not None else positions


def serve(model_path: str, host: str = "127.0.0.1", port: int = 8000, kind: str = "reward", *,
          max_batch: int = 8, device: str = "cpu", limits: ServeLimits | None = None) -> GatedHTTPServer:
    """A bound (not yet serving) server; run `serve_forever()` (e.g. in a thread), then `shutdown()`."""
    limits = limits or ServeLimits()
    app = _load_app(model_path, kind, max_batch, device, limits)
    server = GatedHTTPServer((host, port), PoolingHandler, limits)
    server.app = app  # type: ignore[attr-defined]
    return server


def _parser() -> argparse.ArgumentParser:
    default = ServeLimits()
    parser = argparse.ArgumentParser(prog="hybridrl serve", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="local HF model directory (num_labels=1 token classifier)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    parser.add_argument("--kind", choices=KINDS, default="reward", help="what the model is (reported in /v1/models)")
    parser.add_argument("--max-batch", type=int, default=8, help="sequences per forward pass")
    parser.add_argument("--device", default="cpu")
    limits = parser.add_argument_group("limits (a request over one is refused with a JSON error)")
    limits.add_argument("--max-body-mb", type=float, default=default.max_body_bytes / MIB, help="one request's body (413)")
    limits.add_argument("--max-tokens", type=int, default=default.max_tokens, help="tokens in one request (413)")
    limits.add_argument("--max-seq-len", type=int, default=None,
                        help="tokens in one sequence (400); default: the model's max_position_embeddings")
    limits.add_argument("--max-inflight-mb", type=float, default=default.max_inflight_bytes / MIB,
                        help="bodies of all requests in flight together; more wait, then get 503")
    limits.add_argument("--max-connections", type=int, default=default.max_connections, help="open at once (503)")
    limits.add_argument("--workers", type=int, default=default.workers, help="threads handling complete requests")
    limits.add_argument("--request-timeout-s", type=float, default=default.request_timeout_s,
                        help="to receive a whole request (408), and again to send its answer")
    limits.add_argument("--backlog", type=int, default=default.backlog, help="the listen queue")
    return parser


def limits_from_args(args: argparse.Namespace) -> ServeLimits:
    return ServeLimits(max_body_bytes=int(args.max_body_mb * MIB), max_tokens=args.max_tokens,
                       max_seq_len=args.max_seq_len, max_inflight_bytes=int(args.max_inflight_mb * MIB),
                       max_connections=args.max_connections, workers=args.workers,
                       request_timeout_s=args.request_timeout_s, backlog=args.backlog)


def main_serve(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        limits = limits_from_args(args)
    except ValueError as err:
        parser.error(str(err))
    server = serve(args.model, args.host, args.port, args.kind, max_batch=args.max_batch, device=args.device,
                   limits=limits)
    token = server.app.token  # type: ignore[attr-defined]
    auth = "required" if token else f"off (set {TOKEN_ENV} to require a bearer token)"
    if args.host not in LOOPBACK_HOSTS and not token:
        log.warning("serving on %s without authentication; anyone who can reach it can use it", args.host)
    host, port = server.server_address[:2]
    log.info("serving %s model %s at http://%s:%s (POST /pooling); auth %s", args.kind, args.model, host, port, auth)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopping")
    finally:
        server.server_close()
    return 0
