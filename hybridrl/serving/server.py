"""`hybridrl serve`: a local value/reward model behind vLLM's pooling API (`POST /pooling`, see protocol.py).

Also `GET /health` (200, no auth) and `GET /v1/models`. With env HYBRIDRL_SERVE_TOKEN set, /pooling and
/v1/models require `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hybridrl.logging.log import get_logger
from hybridrl.models.hf import ModelLoadError, load_tokenizer, load_value_model
from hybridrl.serving.protocol import RequestError, build_pooling_response, parse_pooling_request
from hybridrl.serving.scorer import TokenScorer

TOKEN_ENV = "HYBRIDRL_SERVE_TOKEN"
KINDS = ("reward", "value")
MAX_BODY_BYTES = 64 << 20
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
log = get_logger("serving")


@dataclass
class PoolingApp:
    """What the request handler needs: the scorer, the optional tokenizer, the name and the auth token."""
    scorer: TokenScorer
    tokenizer: Any
    model_name: str
    kind: str
    token: str | None
    lock: threading.Lock = field(default_factory=threading.Lock)  # one forward at a time: CPU/GPU is shared
    created: int = field(default_factory=lambda: int(time.time()))

    def token_ids(self, texts: list[str], add_special_tokens: bool) -> list[list[int]]:
        if self.tokenizer is None:
            raise RequestError("this server has no tokenizer (none in the model directory); send token ids")
        return [self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"] for text in texts]

    def pool(self, body: Any) -> dict:
        request = parse_pooling_request(body, self.model_name, self.scorer.vocab_size)
        with self.lock:  # the tokenizer is not safe to share between threads either
            token_ids = request.token_ids or self.token_ids(request.texts or [], request.add_special_tokens)
            outputs = self.scorer.score(token_ids)
        return build_pooling_response(outputs, self.model_name)

    def models(self) -> dict:
        card = {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "hybridrl",
                "root": self.model_name, "parent": None, "hybridrl_kind": self.kind}
        return {"object": "list", "data": [card]}


class PoolingHandler(BaseHTTPRequestHandler):
    server_version = "hybridrl-serve"
    timeout = 60  # seconds a client may take to send a request; a stalled one frees its thread

    @property
    def app(self) -> PoolingApp:
        return self.server.app  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.debug("%s %s", self.address_string(), format % args)

    def _reply(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
                413: "RequestTooLargeError"}.get(status, "InternalServerError")
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
        # Read the body before answering anything: closing with unread data resets the connection and
        # the client would see a reset instead of our error.
        raw = self._read_body()
        if raw is None:
            return
        if self.path != "/pooling":
            self._error(404, f"no route POST {self.path}; this server answers POST /pooling")
        elif self._authorized():
            try:
                body = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                self._error(400, f"the request body is not valid JSON ({err})")
                return
            self._answer_pooling(body)

    def _read_body(self) -> bytes | None:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._error(400, "a Content-Length header is required")
            return None
        if not 0 < length <= MAX_BODY_BYTES:
            self.close_connection = True
            self._error(413 if length > 0 else 400, f"request body of {length} bytes; must be 1..{MAX_BODY_BYTES}")
            return None
        return self.rfile.read(length)

    def _answer_pooling(self, body: Any) -> None:
        try:
            self._reply(200, self.app.pool(body))
        except RequestError as err:
            self._error(err.status, str(err))
        except Exception as err:  # reported to the client as 500 (retryable) and logged with the traceback
            log.exception("pooling request failed")
            self._error(500, f"scoring failed: {type(err).__name__}: {err}")


def _load_app(model_path: str, kind: str, max_batch: int, device: str) -> PoolingApp:
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
    return PoolingApp(scorer, tokenizer, model_name=model_path, kind=kind, token=os.environ.get(TOKEN_ENV) or None)


def serve(model_path: str, host: str = "127.0.0.1", port: int = 8000, kind: str = "reward", *,
          max_batch: int = 8, device: str = "cpu") -> ThreadingHTTPServer:
    """A bound (not yet serving) server; run `serve_forever()` (e.g. in a thread), then `shutdown()`."""
    app = _load_app(model_path, kind, max_batch, device)
    server = ThreadingHTTPServer((host, port), PoolingHandler)
    server.daemon_threads = True
    server.app = app  # type: ignore[attr-defined]
    return server


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hybridrl serve", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="local HF model directory (num_labels=1 token classifier)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    parser.add_argument("--kind", choices=KINDS, default="reward", help="what the model is (reported in /v1/models)")
    parser.add_argument("--max-batch", type=int, default=8, help="sequences per forward pass")
    parser.add_argument("--device", default="cpu")
    return parser


def main_serve(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    server = serve(args.model, args.host, args.port, args.kind, max_batch=args.max_batch, device=args.device)
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
