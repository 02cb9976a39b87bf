"""What one client may ask of `hybridrl serve`, and the memory the server holds for requests in flight.

Memory: a request's body is held from its first byte until its answer is sent, and the bodies of all
requests in flight share `max_inflight_bytes` (a request that does not fit waits, then gets 503). Parsed
JSON takes up to ~8x its text, and heads are capped per connection, so the server's memory above the
model stays below about 8 x max_inflight_bytes + max_connections x max_head_bytes + one answer of
max_tokens tokens (~100 bytes a token while it is built).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

MIB = 1 << 20


@dataclass(frozen=True)
class ServeLimits:
    max_body_bytes: int = 16 * MIB  # one request's body (413 above)
    max_tokens: int = 1 << 20  # tokens in one request, all sequences together (413 above)
    max_seq_len: int | None = None  # one sequence; None = the model's max_position_embeddings (400 above)
    max_inflight_bytes: int = 64 * MIB  # bodies of all requests in flight together
    max_head_bytes: int = 64 * 1024  # request line and headers (431 above)
    max_connections: int = 256  # open at once; more are answered 503 at once
    workers: int = 4  # threads that parse, score and answer complete requests (forwards run one at a time)
    request_timeout_s: float = 30.0  # to receive a whole request, and again to send its answer (408 above)
    backlog: int = 1024  # the listen queue (the kernel caps it at net.core.somaxconn)

    def __post_init__(self) -> None:
        counts = {"max_body_bytes": self.max_body_bytes, "max_tokens": self.max_tokens,
                  "max_head_bytes": self.max_head_bytes, "max_connections": self.max_connections,
                  "workers": self.workers, "backlog": self.backlog}
        bad = [f"{name}={value}" for name, value in counts.items() if value < 1]
        if self.max_seq_len is not None and self.max_seq_len < 1:
            bad.append(f"max_seq_len={self.max_seq_len}")
        if not self.request_timeout_s > 0:
            bad.append(f"request_timeout_s={self.request_timeout_s}")
        if bad:
            raise ValueError(f"hybridrl serve limits must be positive: {', '.join(bad)}")
        if self.max_inflight_bytes < self.max_body_bytes:
            raise ValueError(f"max_inflight_bytes ({self.max_inflight_bytes}) must be at least max_body_bytes "
                             f"({self.max_body_bytes}), or a largest request could never be served")


class ByteBudget:
    """Bytes shared by the requests in flight: `try_take(n)` reserves n or refuses; `give_back(n)` returns them."""

    def __init__(self, total: int) -> None:
        self.total, self.free = total, total
        self._lock = threading.Lock()

    def try_take(self, amount: int) -> bool:
        with self._lock:
            if amount > self.free:
                return False
            self.free -= amount
            return True

    def give_back(self, amount: int) -> None:
        with self._lock:
            self.free = min(self.total, self.free + amount)
