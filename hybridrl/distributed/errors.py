"""Failures of worker groups and placement: each message names the role, the rank and what to do next."""

from __future__ import annotations


class WorkerError(RuntimeError):
    """A worker method raised: carries the role, the rank, the method and the worker's formatted traceback."""

    def __init__(self, role: str, rank: int, method: str, worker_traceback: str, note: str = "") -> None:
        self.role, self.rank, self.method, self.worker_traceback = role, rank, method, worker_traceback
        message = f"{role} worker rank {rank} failed in {method}()"
        if note:
            message += f" ({note})"
        super().__init__(f"{message}; the worker's traceback:\n{worker_traceback.rstrip()}")


class WorkerDiedError(RuntimeError):
    """A worker process (or Ray actor) exited while the controller waited on it; the group is shut down."""

    def __init__(self, role: str, rank: int, method: str, cause: str, log_tail: str | None = None) -> None:
        self.role, self.rank, self.method, self.cause, self.log_tail = role, rank, method, cause, log_tail
        message = (f"{role} worker rank {rank} died during {method}(): {cause}. Common causes: out of host memory "
                   f"(the kernel OOM killer, see `dmesg`), a crash in native code, or a kill signal from outside")
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
