"""Loopback servers for the remote-scoring tests: the real pooling server, a scripted stub, verl batches."""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from hybridrl.models.hf import load_value_model
from hybridrl.models.tiny import save_tiny_model_dir
from hybridrl.utils.batch import Batch

LOOPBACK = "127.0.0.1"


def save_value_model_dir(path: str, seed: int = 0, **config_overrides) -> str:
    """A tiny value model directory whose score head is fixed (saved), so every load is identical."""
    save_tiny_model_dir(path, arch="qwen2", seed=seed, **config_overrides)
    torch.manual_seed(seed)
    load_value_model(path).save_pretrained(path)
    return path


@contextlib.contextmanager
def running(server: ThreadingHTTPServer) -> Iterator[str]:
    """Serve in a background thread; yields the base URL; shuts down and closes on exit."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class StubServer(ThreadingHTTPServer):
    """Answers POST /pooling with `respond(request_number, body) -> (status, bytes)`; counts requests."""
    daemon_threads = True

    def __init__(self, respond: Callable[[int, dict], tuple[int, bytes]], hold_until_in_flight: int = 0):
        super().__init__((LOOPBACK, 0), _StubHandler)
        self.respond = respond
        self.hold_until_in_flight = hold_until_in_flight
        self.num_requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.cond = threading.Condition()


class _StubHandler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002
        return  # keep test output clean; the tests assert on counters instead

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        stub: StubServer = self.server  # type: ignore[assignment]
        with stub.cond:
            number = stub.num_requests
            stub.num_requests += 1
            stub.in_flight += 1
            stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
            stub.cond.notify_all()
            # Hold requests until enough are in flight (bounded wait) so the concurrency peak is reached.
            stub.cond.wait_for(lambda: stub.in_flight >= stub.hold_until_in_flight, timeout=1.0)
        try:
            status, payload = stub.respond(number, body)
        finally:
            # No longer in flight once answered: counted down after the write, a client that sends its next
            # request as soon as it reads this answer was sometimes counted one over its limit.
            with stub.cond:
                stub.in_flight -= 1
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up on purpose (timeout tests); it retries on a new connection


def ok_response(body: dict, value: float = 0.5) -> tuple[int, bytes]:
    """A well-formed pooling answer: `value` at every token of every input."""
    data = [{"index": i, "object": "pooling", "data": [[value]] * len(row)} for i, row in enumerate(body["input"])]
    return 200, json.dumps({"object": "list", "data": data}).encode()


def slow(seconds: float, respond: Callable[[int, dict], tuple[int, bytes]]) -> Callable[[int, dict], tuple[int, bytes]]:
    def delayed(number: int, body: dict) -> tuple[int, bytes]:
        time.sleep(seconds)
        return respond(number, body)
    return delayed


def verl_batch(prompts: list[list[int]], responses: list[list[int]], pad_id: int = 0) -> Batch:
    """input_ids (B, P+R) = left-padded prompts + right-padded responses, with masks and position ids."""
    width_p, width_r = max(map(len, prompts)), max(map(len, responses))
    rows, masks, resp, resp_mask = [], [], [], []
    for prompt, response in zip(prompts, responses):
        left, right = width_p - len(prompt), width_r - len(response)
        rows.append([pad_id] * left + prompt + response + [pad_id] * right)
        masks.append([0] * left + [1] * (len(prompt) + len(response)) + [0] * right)
        resp.append(response + [pad_id] * right)
        resp_mask.append([1] * len(response) + [0] * right)
    mask = torch.tensor(masks)
    return Batch({"input_ids": torch.tensor(rows), "attention_mask": mask,
                  "position_ids": (mask.cumsum(-1) - 1).clamp(min=0), "responses": torch.tensor(resp),
                  "response_mask": torch.tensor(resp_mask)})


class RawServer(socketserver.ThreadingTCPServer):
    """A TCP server on loopback whose `behave(sock, number)` does whatever a misbehaving HTTP server does with
    each accepted connection (trickle, stall, reset); counts connections and records when clients hang up."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, behave: Callable[[socket.socket, int], None]):
        super().__init__((LOOPBACK, 0), _RawHandler)
        self.behave = behave
        self.num_connections = 0
        self.client_gone = threading.Event()  # a write failed: the client closed its end
        self.lock = threading.Lock()

    def serve_forever(self, poll_interval: float = 0.05) -> None:  # `running` passes poll_interval
        super().serve_forever(poll_interval)


class _RawHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: RawServer = self.server  # type: ignore[assignment]
        with server.lock:
            number = server.num_connections
            server.num_connections += 1
        try:
            server.behave(self.request, number)
        except OSError:  # BrokenPipe / ConnectionReset: the client went away
            server.client_gone.set()


def read_request(sock: socket.socket) -> bytes:
    """Everything up to the end of the headers and the body the Content-Length announces."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a crashed server or a middlebox does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def raw_exchange(url: str, data: bytes, timeout_s: float = 30.0) -> tuple[int, dict]:
    """Send `data` as is on a fresh connection; (status, JSON body) of the answer (status 0: none came)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before all was sent: the answer is still there to read
        return parse_answer(read_all(sock))


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def parse_answer(raw: bytes) -> tuple[int, dict]:
    if not raw:
        return 0, {}
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else {}


def post(path: str, body: bytes, extra_headers: str = "") -> bytes:
    """A raw HTTP/1.1 POST with Content-Length."""
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"{extra_headers}\r\n").encode() + body
