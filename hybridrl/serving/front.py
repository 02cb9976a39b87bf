"""An HTTP/1.x server whose request handlers only ever see complete requests (the front of `hybridrl serve`).

One front thread accepts connections and reads every request's head and body without blocking (a
selector), under the limits of `ServeLimits`; a complete request goes to one of a fixed number of
handler threads, with its bytes in memory. So a slow client costs a socket and a small buffer, never a
handler thread: a thousand slowloris connections leave the handlers free, and each is cut off when its
`request_timeout_s` passes (408). Refusals come from the front at once, as JSON: 413 for a body over
the cap, 431 for a head over its cap, 411 without Content-Length, 503 when the connection limit or the
in-flight memory is reached. After a refusal the front reads (and drops) what the client still sends for
a moment before closing, so the client sees the answer rather than a connection reset.

Every answer closes its connection (one request per connection: what a pooling client needs, and no
request boundaries to get wrong).
"""

from __future__ import annotations

import json
import queue
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from hybridrl.logging.log import get_logger
from hybridrl.serving.limits import ByteBudget, ServeLimits

log = get_logger("serving")
TICK_S = 0.1  # how often deadlines are checked
DRAIN_S = 1.0  # after a refusal, how long what the client still sends is read and dropped
REASONS = {400: "Bad Request", 408: "Request Timeout", 411: "Length Required", 413: "Payload Too Large",
           431: "Request Header Fields Too Large", 503: "Service Unavailable"}


@dataclass
class Request:
    """A complete request, as the front hands it to a handler thread (`BaseRequestHandler`'s `request`)."""
    sock: socket.socket
    address: Any
    data: bytes  # head and body
    reserved: int  # bytes of the in-flight budget it holds until answered


@dataclass
class _Incoming:
    sock: socket.socket
    address: Any
    deadline: float
    buffer: bytearray = field(default_factory=bytearray)
    head_end: int | None = None  # index just past the blank line ending the head
    length: int = 0  # Content-Length
    reserved: int = 0
    admitted: bool = False  # head accepted and its body's bytes reserved: reading the body
    expects_continue: bool = False  # `Expect: 100-continue`: the client waits for a go-ahead before its body
    draining: bool = False  # answered (refused): reading and dropping the rest until DRAIN_S has passed


def json_response(status: int, message: str, extra_headers: str = "") -> bytes:
    body = json.dumps({"error": {"message": message, "type": REASONS.get(status, "Error"), "code": status}}).encode()
    return (f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra_headers}\r\n").encode() + body


class GatedHTTPServer:
    """`serve_forever()` runs the front; `shutdown()` stops it (from another thread); `server_close()` frees all.

    `handler_class(request, client_address, server)` handles one complete `Request`, as socketserver's."""

    def __init__(self, address: tuple[str, int], handler_class: type, limits: ServeLimits) -> None:
        self.limits, self.handler_class = limits, handler_class
        self.socket = socket.create_server(address, backlog=limits.backlog)
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()[:2]
        self.budget = ByteBudget(limits.max_inflight_bytes)
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._incoming: dict[socket.socket, _Incoming] = {}
        self._waiting: list[_Incoming] = []  # heads read, waiting for room in the in-flight budget
        self._complete: queue.Queue[Request | None] = queue.Queue()
        self._open_lock = threading.Lock()
        self.num_open = 0  # connections accepted and not yet closed (front and handlers)
        self._accept_paused_until: float | None = None
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._handlers = [threading.Thread(target=self._handle_complete, name=f"hybridrl-serve-{i}", daemon=True)
                          for i in range(limits.workers)]
        for thread in self._handlers:
            thread.start()

    # ------------------------------------------------------------------------------------ lifecycle
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._stopped.clear()
        self._selector.register(self.socket, selectors.EVENT_READ, "listen")
        self._selector.register(self._wake_read, selectors.EVENT_READ, "wake")
        try:
            while not self._stop.is_set():
                try:
                    self._serve_once(poll_interval)
                except Exception:  # noqa: BLE001 - the front must outlive a bug: log it and keep serving
                    log.exception("the server's front loop failed; it goes on")
                    time.sleep(TICK_S)
        finally:
            if self._accept_paused_until is None:
                self._selector.unregister(self.socket)
            self._accept_paused_until = None
            self._selector.unregister(self._wake_read)
            self._stopped.set()

    def _serve_once(self, poll_interval: float) -> None:
        for key, _ in self._selector.select(timeout=min(poll_interval, TICK_S)):
            if key.data == "listen":
                self._accept()
            elif key.data == "wake":
                self._wake_read.recv(4096)
            else:
                self._guarded(self._read, key.data)
        self._expire(time.monotonic())

    def shutdown(self) -> None:
        """Stop `serve_forever` and wait for it (safe to call when it is not running, and twice)."""
        self._stop.set()
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass  # closed already: serve_forever is not running
        self._stopped.wait()

    def server_close(self) -> None:
        """Close the listening socket, open connections and handler threads (safe to call twice)."""
        if self.socket.fileno() < 0:
            return
        self._stop.set()
        self.socket.close()
        for incoming in list(self._incoming.values()) + self._waiting:
            self._close(incoming)
        for _ in self._handlers:
            self._complete.put(None)
        for thread in self._handlers:
            thread.join(timeout=5)
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()

    # -------------------------------------------------------------------------------------- front
    def _accept(self) -> None:
        while True:
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # e.g. out of file descriptors: serve those open, try again a tick later
                log.warning("accept failed (%s); pausing new connections for %.1f s", err, TICK_S)
                self._selector.unregister(self.socket)
                self._accept_paused_until = time.monotonic() + TICK_S
                return
            sock.setblocking(False)
            with self._open_lock:
                self.num_open += 1
                full = self.num_open > self.limits.max_connections
            incoming = _Incoming(sock, address, time.monotonic() + self.limits.request_timeout_s)
            self._incoming[sock] = incoming
            self._selector.register(sock, selectors.EVENT_READ, incoming)
            if full:
                self._refuse(incoming, 503, f"the server has {self.limits.max_connections} connections open (its "
                                            "--max-connections); retry shortly", "Retry-After: 1\r\n")

    def _guarded(self, step: Any, incoming: _Incoming) -> None:
        """`step(incoming)`; a failure there closes that one connection and is logged, the front goes on."""
        try:
            step(incoming)
        except Exception:  # noqa: BLE001 - one connection must never stop the server
            log.exception("reading a request from %s failed; its connection is closed", incoming.address)
            self._incoming.pop(incoming.sock, None)
            if incoming in self._waiting:
                self._waiting.remove(incoming)
            try:
                self._selector.unregister(incoming.sock)
            except (KeyError, ValueError):
                pass
            if incoming.reserved:
                self.budget.give_back(incoming.reserved)
            self._closed(incoming.sock)

    def _read(self, incoming: _Incoming) -> None:
        try:
            chunk = incoming.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:  # the client closed (or reset) its end
            self._close(incoming)
            return
        if incoming.draining:
            return
        incoming.buffer += chunk
        if incoming.head_end is None:
            self._read_head(incoming, len(incoming.buffer) - len(chunk))
        if incoming.admitted and not incoming.draining:
            self._maybe_complete(incoming)

    def _read_head(self, incoming: _Incoming, searched: int) -> None:
        end = incoming.buffer.find(b"\r\n\r\n", max(0, searched - 3))
        if (end if end >= 0 else len(incoming.buffer)) > self.limits.max_head_bytes:
            self._refuse(incoming, 431, f"the request line and headers exceed {self.limits.max_head_bytes} bytes")
            return
        if end < 0:
            return
        incoming.head_end = end + 4
        problem = self._check_head(incoming, bytes(incoming.buffer[:end]))
        if problem is not None:
            self._refuse(incoming, *problem)
        elif incoming.length and not self.budget.try_take(incoming.length):
            self._selector.unregister(incoming.sock)  # read no more until there is room for its body
            del self._incoming[incoming.sock]
            self._waiting.append(incoming)
        else:
            self._admitted(incoming)

    def _check_head(self, incoming: _Incoming, head: bytes) -> tuple[int, str] | None:
        """(status, message) when the head is refused; sets `incoming.length` when it is not."""
        fields: dict[bytes, list[bytes]] = {}
        for line in head.split(b"\r\n")[1:]:
            name, colon, value = line.partition(b":")
            if colon:
                fields.setdefault(name.strip().lower(), []).append(value.strip())
        if b"transfer-encoding" in fields:
            return 411, "chunked or other transfer encodings are not supported; send the body with Content-Length"
        lengths = fields.get(b"content-length", [b"0"])
        if len(lengths) != 1 or not lengths[0].isdigit():
            return 400, "send exactly one Content-Length header with a number of bytes"
        incoming.length = int(lengths[0])
        incoming.expects_continue = fields.get(b"expect") == [b"100-continue"]
        if head.split(b" ", 1)[0] == b"POST" and b"content-length" not in fields:
            return 411, "a POST needs a Content-Length header"
        if incoming.length > self.limits.max_body_bytes:
            return 413, (f"request body of {incoming.length} bytes; this server takes at most "
                         f"{self.limits.max_body_bytes} (its --max-body-mb); send fewer sequences per request")
        return None

    def _admitted(self, incoming: _Incoming) -> None:
        incoming.reserved, incoming.admitted = incoming.length, True
        if incoming.expects_continue and len(incoming.buffer) < incoming.head_end + incoming.length:  # type: ignore[operator]
            self._send_quietly(incoming.sock, b"HTTP/1.1 100 Continue\r\n\r\n")

    def _maybe_complete(self, incoming: _Incoming) -> None:
        size = incoming.head_end + incoming.length  # type: ignore[operator]
        if len(incoming.buffer) < size:
            return
        self._selector.unregister(incoming.sock)
        del self._incoming[incoming.sock]
        incoming.sock.setblocking(True)
        self._complete.put(Request(incoming.sock, incoming.address, bytes(incoming.buffer[:size]), incoming.reserved))

    def _expire(self, now: float) -> None:
        if self._accept_paused_until is not None and now >= self._accept_paused_until:
            self._accept_paused_until = None
            self._selector.register(self.socket, selectors.EVENT_READ, "listen")
        for incoming in list(self._incoming.values()):
            if now >= incoming.deadline:
                self._guarded(self._timed_out, incoming)
        for incoming in list(self._waiting):
            self._guarded(self._retry_admission, incoming)

    def _timed_out(self, incoming: _Incoming) -> None:
        if incoming.draining:
            self._close(incoming)
        else:
            self._refuse(incoming, 408, f"the request did not arrive within {self.limits.request_timeout_s:g} s "
                                        "(the server's --request-timeout-s)")

    def _retry_admission(self, incoming: _Incoming) -> None:
        """A head waiting for room in the in-flight budget: admitted when there is (with a new deadline for its body:
        the wait was the server's), 503 at its deadline."""
        if self.budget.try_take(incoming.length):
            self._waiting.remove(incoming)
            incoming.deadline = time.monotonic() + self.limits.request_timeout_s
            self._incoming[incoming.sock] = incoming
            self._selector.register(incoming.sock, selectors.EVENT_READ, incoming)
            self._admitted(incoming)
            self._maybe_complete(incoming)
        elif time.monotonic() >= incoming.deadline:
            self._waiting.remove(incoming)
            self._send_quietly(incoming.sock, json_response(
                503, "the server is busy with other requests (its --max-inflight-mb); retry shortly",
                "Retry-After: 1\r\n"))
            self._close(incoming)

    def _refuse(self, incoming: _Incoming, status: int, message: str, extra_headers: str = "") -> None:
        """Answer `status` now, then drop what the client still sends for DRAIN_S before closing."""
        if incoming.reserved:  # nothing more is kept of its body
            self.budget.give_back(incoming.reserved)
            incoming.reserved = 0
        self._send_quietly(incoming.sock, json_response(status, message, extra_headers))
        try:
            incoming.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        incoming.draining, incoming.buffer = True, bytearray()
        incoming.deadline = time.monotonic() + DRAIN_S

    @staticmethod
    def _send_quietly(sock: socket.socket, data: bytes) -> None:
        try:
            sock.send(data)  # a small answer fits the socket's send buffer; a client that reads nothing loses it
        except OSError:
            pass

    def _close(self, incoming: _Incoming) -> None:
        if self._incoming.pop(incoming.sock, None) is not None:
            self._selector.unregister(incoming.sock)
        if incoming.reserved:
            self.budget.give_back(incoming.reserved)
        self._closed(incoming.sock)

    def _closed(self, sock: socket.socket) -> None:
        try:
            sock.close()
        finally:
            with self._open_lock:
                self.num_open -= 1

    # ----------------------------------------------------------------------------------- handlers
    def _handle_complete(self) -> None:
        while True:
            request = self._complete.get()
            if request is None:
                return
            try:
                request.sock.settimeout(self.limits.request_timeout_s)  # sendall: the whole answer within it
                self.handler_class(request, request.address, self)
            except OSError as err:  # the client went away while its answer was being sent
                log.debug("answering %s failed: %s", request.address, err)
            except Exception:  # noqa: BLE001 - a handler bug must not take its thread down
                log.exception("handling a request failed")
            finally:
                self.budget.give_back(request.reserved)
                try:
                    request.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self._closed(request.sock)
