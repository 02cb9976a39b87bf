"""Worker stderr: each rank writes a log file (durable, so a crash's last words survive); the controller
echoes new lines with a `(role rank N)` prefix and quotes the tail when a worker dies.
"""

from __future__ import annotations

import os
import sys
import threading


def tail_lines(path: str, num_lines: int = 30) -> str:
    """The last `num_lines` lines of a text file (reads at most its last 16 KiB)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            lines = f.read().decode("utf-8", errors="replace").splitlines()
    except OSError as err:
        return f"(could not read its log {path}: {err})"
    return "\n".join(lines[-num_lines:])


class LogForwarder:
    """A daemon thread copying complete new lines of each rank's log to this process's stderr."""

    def __init__(self, paths: list[str], role: str, interval_s: float = 0.5) -> None:
        self.paths, self.role, self.interval_s = paths, role, interval_s
        self._offsets = [0] * len(paths)
        self._partial = [b""] * len(paths)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"hybridrl-{role}-logs", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.flush()

    def flush(self) -> None:
        for rank, path in enumerate(self.paths):
            try:
                with open(path, "rb") as f:
                    f.seek(self._offsets[rank])
                    data = f.read()
            except FileNotFoundError:
                continue  # the rank has not started writing yet
            self._offsets[rank] += len(data)
            *lines, self._partial[rank] = (self._partial[rank] + data).split(b"\n")
            for line in lines:
                sys.stderr.write(f"({self.role} rank {rank}) {line.decode('utf-8', errors='replace')}\n")

    def stop(self) -> None:
        """Stop the thread and echo what is left, including a last line without a newline."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.flush()
        for rank, rest in enumerate(self._partial):
            if rest:
                sys.stderr.write(f"({self.role} rank {rank}) {rest.decode('utf-8', errors='replace')}\n")
                self._partial[rank] = b""
