"""Failures of worker groups and placement: each message names the role, the rank and what to do next."""

from __future__ import annotations

import re

_TRACEBACK_START = "Traceback (most recent call last):"


def final_exception(formatted_traceback: str) -> str:
    """The exception a formatted traceback ends with, `Type: message` (every line of the message, the type
    without its module path), without the frames above it; the whole text if it has no frames."""
    lines = formatted_traceback.rstrip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    start = frames[-1] + 1 if frames else 0
    while start < len(lines) and lines[start].startswith(" "):  # the frame's source line and its ^^^ markers
        start += 1
    exception = "\n".join(lines[start:]).strip()
    return re.sub(r"^(?:\w+\.)+(?=\w+(?::|$))", "", exception, count=1)  # hybridrl.models.hf.ModelLoadError


class WorkerError(RuntimeError):
    """A worker method raised: carries the role, the rank, the method and the worker's formatted traceback.

    The message leads with the worker's exception (which names the cause and the fix for our own errors),
    as one process would show it; the traceback follows."""

    def __init__(self, role: str, rank: int, method: str, worker_traceback: str, note: str = "") -> None:
        self.role, self.rank, self.method, self.worker_traceback = role, rank, method, worker_traceback
        self.note = note
        message = f"{role} worker rank {rank} failed in {method}(): {final_exception(worker_traceback)}"
        if note:
            message += f"\n({note})"
        super().__init__(f"{message}\nthe worker's traceback:\n{worker_traceback.rstrip()}")

    def with_note(self, extra: str) -> WorkerError:
        """The same error with `extra` added to its note (e.g. where the group's rank logs are kept)."""
        note = f"{self.note}; {extra}" if self.note else extra
        return WorkerError(self.role, self.rank, self.method, self.worker_traceback, note=note)


class WorkerDiedError(RuntimeError):
    """A worker process (or Ray actor) exited while the controller waited on it; the group is shut down."""

    def __init__(self, role: str, rank: int, method: str, cause: str, log_tail: str | None = None) -> None:
        self.role, self.rank, self.method, self.cause, self.log_tail = role, rank, method, cause, log_tail
        message = f"{role} worker rank {rank} died during {method}(): {cause}"
        if log_tail and _TRACEBACK_START in log_tail:  # it died of an exception: that first, as in one process
            message += f"; the last exception in its stderr: {final_exception(log_tail)}"
        else:
            message += (". Common causes: out of host memory (the kernel OOM killer, see `dmesg`), a crash in native "
                        "code, or a kill signal from outside")
        if log_tail:
            message += f"\nlast lines of its stderr:\n{log_tail.rstrip()}"
        elif log_tail is not None:
            message += "\n(it wrote nothing to stderr)"
        super().__init__(message)


class GroupClosedError(RuntimeError):
    """A call on a worker group that was shut down (explicitly or after a failure)."""


class PlacementError(ValueError):
    """Device placement of the roles is impossible or inconsistent; raised before any worker starts."""


class RayInitError(RuntimeError):
    """ray.init failed; the message says which cluster it tried and how to fix it."""
