"""Top-level error presentation: a known, user-fixable failure prints its message, not a traceback.

The message of each of these errors already names the cause and the fix. `HYDRA_FULL_ERROR=1` (the variable verl
users know from Hydra) adds the traceback; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Callable

# Matched by class name along the exception's MRO, so this leaf module imports none of the layers that raise them.
USER_FACING = ("ConfigError", "ModelLoadError", "CheckpointError", "RewardFunctionError", "DatasetError",
               "RolloutCapacityError", "PhaseOOMError", "PlacementError", "WorkerDiedError",
               "WorkerError", "RemoteScoringError", "MissingDependencyError",
               "MegatronCheckpointError", "GroupClosedError", "RayInitError", "CompileError",
               "GraphCaptureError", "DynamicSamplingError", "NonFiniteTrainingError")
FULL_ERROR_ENV = "HYDRA_FULL_ERROR"


def is_user_facing(error: BaseException) -> bool:
    """Whether `error` (or a class it derives from) is one of the errors whose message says what to do."""
    return any(cls.__name__ in USER_FACING for cls in type(error).__mro__)


WORKER_TRACEBACK_MARK = "\nthe worker's traceback:\n"  # distributed/errors.py WorkerError's layout


def user_message(error: BaseException) -> str:
    """The error's message; a worker's error keeps its traceback only when the worker's own error is a bug."""
    message = str(error)
    head, mark, _ = message.partition(WORKER_TRACEBACK_MARK)
    worker_error = head.split("(): ", 1)[-1].split(":", 1)[0].strip()
    if mark and worker_error in USER_FACING and not full_error_requested():
        return head
    return message


def full_error_requested() -> bool:
    return os.environ.get(FULL_ERROR_ENV, "").strip().lower() in ("1", "true", "yes")


def report_user_error(error: BaseException) -> int:
    """Print `error` for a person (stderr) and return the exit status: 2 for configuration, 1 otherwise."""
    if full_error_requested():
        traceback.print_exc()
    if type(error).__name__ == "ConfigError":  # the message is the whole story: which keys to change
        print(f"hybridrl: configuration error:\n{user_message(error)}", file=sys.stderr)
        return 2
    print(f"hybridrl: {type(error).__name__}: {user_message(error)}", file=sys.stderr)
    if not full_error_requested():
        print(f"(set {FULL_ERROR_ENV}=1 to see the traceback)", file=sys.stderr)
    return 1


def run_with_actionable_errors(fn: Callable[[], object]) -> int:
    """Run `fn`; a user-facing error becomes its message and an exit status, anything else propagates."""
    try:
        fn()
    except KeyboardInterrupt as interrupt:  # a run stopped by a signal says how, and exits 128 + the signal
        print(f"hybridrl: {interrupt}" if str(interrupt) else "hybridrl: interrupted", file=sys.stderr)
        return getattr(interrupt, "exit_code", 130)
    except Exception as error:  # re-raised unless it is one of ours
        if not is_user_facing(error):
            raise
        return report_user_error(error)
    return 0
