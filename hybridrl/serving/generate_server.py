"""A generative reward model behind HTTP on loopback: SGLang's `/generate` and OpenAI's `/v1/chat/completions` and
`/v1/completions` (generate_protocol.py) over a backend's request API (rollout.base.RequestEngine), plus
`GET /health` and `GET /v1/models`.

The front is `hybridrl serve`'s (front.py: bodies, heads, connections and the time to send a request are capped,
refusals are JSON). Each complete request is answered on one of the front's handler threads, which hands the
generation to ONE asyncio event loop (its own thread) where the engine batches every request in flight
(continuous batching); so `limits.workers` handler threads are the requests generating at once.
"""

from __future__ import annotations

import asyncio
import json
import reprlib
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from hybridrl.logging.log import get_logger
from hybridrl.rollout.base import RequestEngine, TokenOutput
from hybridrl.serving.front import GatedHTTPServer
from hybridrl.serving.generate_protocol import (GenerationRequest, generate_response, openai_response,
                                                parse_generate, parse_openai)
from hybridrl.serving.limits import ServeLimits
from hybridrl.serving.protocol import RequestError
from hybridrl.serving.server import PoolingHandler

log = get_logger("serving")
POST_ROUTES = {"/generate": "generate", "/v1/chat/completions": "chat", "/v1/completions": "completions"}


@dataclass
class ServingStats:
    """What the server did since the last `take()`: requests answered, tokens in and out, requests that stopped at
    their token budget or the context (`length`), refused/failed requests, and the seconds during which at least
    one request was generating (the reward model's serving time)."""

    requests: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    length_stops: int = 0
    errors: int = 0
    busy_s: float = 0.0
    in_flight: int = 0
    busy_since: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def started(self) -> None:
        with self.lock:
            if self.in_flight == 0:
                self.busy_since = time.monotonic()
            self.in_flight += 1

    def finished(self, prompt_tokens: int = 0, output: TokenOutput | None = None) -> None:
        with self.lock:
            self.in_flight -= 1
            if self.in_flight == 0 and self.busy_since is not None:
                self.busy_s += time.monotonic() - self.busy_since
                self.busy_since = None
            if output is None:  # failed: counted once, by the answer it gets (count_refusal)
                return
            self.requests += 1
            self.prompt_tokens += prompt_tokens
            self.generated_tokens += len(output.token_ids)
            self.length_stops += output.stop_reason == "length"

    def count_refusal(self) -> None:
        with self.lock:
            self.errors += 1

    def take(self) -> dict[str, float]:
        """The counts since the last take, as reward_model/genrm/* metrics, and reset them."""
        with self.lock:
            now = time.monotonic()
            busy = self.busy_s + (now - self.busy_since if self.busy_since is not None else 0.0)
            metrics = {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                       "generated_tokens": self.generated_tokens, "length_stops": self.length_stops,
                       "errors": self.errors, "serving_s": busy}
            self.requests = self.prompt_tokens = self.generated_tokens = self.length_stops = self.errors = 0
            self.busy_s, self.busy_since = 0.0, now if self.in_flight else None
        return {f"reward_model/genrm/{key}": float(value) for key, value in metrics.items()}


class GenerateApp:
    """Turns a parsed request into prompt ids, runs it on the engines' event loop, and builds the answer.

    `engines`: one request API per engine replica (one per device); each request goes to the replica with the
    fewest requests in flight. `max_model_len`: prompt + generated tokens of one request; a request's token budget
    is cut to what is left of it (reported as finish_reason `length`), and a prompt that fills it is refused (400)."""

    def __init__(self, engines: RequestEngine | list[RequestEngine], tokenizer: Any, model_name: str,
                 max_model_len: int, vocab_size: int) -> None:
        self.engines = list(engines) if isinstance(engines, list) else [engines]
        self.tokenizer, self.model_name = tokenizer, model_name
        self.in_flight = [0] * len(self.engines)  # per replica; changed on the event loop's thread only
        self.max_model_len, self.vocab_size = max_model_len, vocab_size
        self.stats = ServingStats()
        self.token = None  # loopback only, no bearer token (PoolingHandler's check reads it)
        self._tokenizer_lock = threading.Lock()  # HF fast tokenizers are not safe to share between threads
        self.loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self.loop.run_forever, name="hybridrl-genrm-loop", daemon=True)
        self._loop_thread.start()

    def answer(self, route: str, body: Any) -> dict | list[dict]:
        """The JSON answer to one request (on a handler thread); RequestError for a bad one. A batched /generate
        gets a list, one answer per prompt."""
        if route == "generate":
            requests, batched = parse_generate(body, self.vocab_size)
        else:
            requests, batched = [parse_openai(body, route, self.vocab_size)], False
        prompts = [self.prompt_ids(request) for request in requests]
        for request, prompt in zip(requests, prompts):
            self.fit_budget(request, len(prompt))
        started = time.monotonic()
        try:
            outputs = self.run(self._generate_all(requests, prompts))
        except ValueError as error:  # the engine's own request checks (e.g. a stop token outside the vocabulary)
            raise RequestError(str(error)) from error
        with self._tokenizer_lock:
            texts = [self.tokenizer.decode(output.token_ids, skip_special_tokens=request.skip_special_tokens)
                     for request, output in zip(requests, outputs)]
        answers = [generate_response(request, output, text, len(prompt), started) if route == "generate" else
                   openai_response(request, output, text, len(prompt), self.model_name)
                   for request, output, text, prompt in zip(requests, outputs, texts, prompts)]
        return answers if batched else answers[0]

    async def _generate_all(self, requests: list[GenerationRequest], prompts: list[list[int]]) -> list[TokenOutput]:
        return list(await asyncio.gather(*(self._generate(request, prompt)
                                           for request, prompt in zip(requests, prompts))))

    async def _generate(self, request: GenerationRequest, prompt_ids: list[int]) -> TokenOutput:
        replica = min(range(len(self.engines)), key=self.in_flight.__getitem__)
        self.in_flight[replica] += 1
        self.stats.started()
        output = None
        try:
            output = await self.engines[replica].generate(f"genrm-{uuid.uuid4().hex}", prompt_ids, request.params)
            return output
        finally:
            self.in_flight[replica] -= 1
            self.stats.finished(len(prompt_ids), output)

    def prompt_ids(self, request: GenerationRequest) -> list[int]:
        if request.prompt_ids is not None:
            return request.prompt_ids
        with self._tokenizer_lock:
            if request.messages is not None:
                try:
                    ids = self.tokenizer.apply_chat_template(request.messages, tokenize=True, return_dict=False,
                                                             add_generation_prompt=request.add_generation_prompt,
                                                             **(request.chat_template_kwargs or {}))
                except Exception as error:  # a template that rejects these messages (roles, content types)
                    raise RequestError(f"the reward model's chat template failed on 'messages': "
                                       f"{type(error).__name__}: {reprlib.repr(str(error))}") from error
            else:
                ids = self.tokenizer(request.text)["input_ids"]
        if not ids:
            raise RequestError("the prompt has no tokens after tokenization")
        return list(ids)

    def fit_budget(self, request: GenerationRequest, prompt_len: int) -> None:
        left = self.max_model_len - prompt_len
        if left < 1:
            raise RequestError(f"the prompt has {prompt_len} tokens; the served reward model takes at most "
                               f"{self.max_model_len} tokens of prompt and output (reward_model.rollout.max_model_len"
                               "); shorten the prompt")
        asked = request.params.max_new_tokens
        request.params.max_new_tokens = min(asked, left) if asked else left

    def run(self, coroutine: Any) -> Any:
        """`coroutine` on the engine's event loop, waited for on this thread."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def abort_all(self) -> None:
        """Abort every request still generating (their callers get what was generated so far)."""
        if self.loop.is_running():
            self.run(_gather([engine.abort_all() for engine in self.engines if hasattr(engine, "abort_all")]))

    def close(self) -> None:
        if not self.loop.is_running():
            return
        self.abort_all()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._loop_thread.join(timeout=10)
        for engine in self.engines:
            close = getattr(engine, "close", None)
            if close is not None:
                close()  # the engine's step thread
        self.loop.close()

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "hybridrl",
                                            "max_model_len": self.max_model_len}]}


async def _gather(coroutines: list) -> list:
    return list(await asyncio.gather(*coroutines))


class GenerateHandler(PoolingHandler):
    """PoolingHandler's socket plumbing and JSON errors, with the generation routes."""

    server_version = "hybridrl-genrm"

    @property
    def genrm(self) -> GenerateApp:
        return self.server.app  # type: ignore[attr-defined]

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path == "/health":
            self._reply(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._reply(200, self.genrm.models())
        else:
            self._error(404, f"no route GET {self.path}; try /health or /v1/models")

    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))  # checked and read by the front
        route = POST_ROUTES.get(self.path.split("?", 1)[0])
        if route is None:
            self._refuse(404, f"no route POST {self.path}; this server answers {sorted(POST_ROUTES)}")
            return
        try:
            body = json.loads(raw) if raw else None
        except (ValueError, RecursionError) as err:  # not UTF-8, not JSON, nested too deeply
            self._refuse(400, f"the request body is not valid JSON ({reprlib.repr(str(err))})")
            return
        if body is None:
            self._refuse(400, "the request has no body; send a JSON object")
            return
        try:
            self._reply(200, json.dumps(self.genrm.answer(route, body)).encode())
        except RequestError as err:
            self._refuse(err.status, str(err))
        except Exception as err:  # reported as 500 and logged with the traceback
            log.exception("generation request failed")
            self._refuse(500, f"generation failed: {type(err).__name__}: {err}")

    def _refuse(self, status: int, message: str) -> None:
        self.genrm.stats.count_refusal()
        self._error(status, message)


class GenerateServer:
    """`start()` binds 127.0.0.1 on a free port and serves on a thread; `address` is verl's "host:port";
    `close()` stops the front, its handler threads, the event loop and the engine's thread (safe twice)."""

    def __init__(self, app: GenerateApp, limits: ServeLimits, host: str = "127.0.0.1") -> None:
        self.app = app
        self.http = GatedHTTPServer((host, 0), GenerateHandler, limits)
        self.http.app = app  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host, port = self.http.server_address[:2]
        return f"{host}:{port}"

    def start(self) -> GenerateServer:
        self._thread = threading.Thread(target=self.http.serve_forever, name="hybridrl-genrm-front", daemon=True)
        self._thread.start()
        log.info("generative reward model %s served at http://%s (POST /generate, /v1/chat/completions, "
                 "/v1/completions)", self.app.model_name, self.address)
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.http.shutdown()  # no new requests
            self._thread.join(timeout=10)
            self._thread = None
        self.app.abort_all()  # handler threads waiting on a generation get its partial answer and finish
        self.http.server_close()
        self.app.close()
