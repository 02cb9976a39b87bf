"""Top-level error presentation: known, user-fixable failures print one clear message first."""

from __future__ import annotations

import sys
import traceback
from typing import Callable

# Exceptions whose message already names the cause and the fix: show it first, traceback after.
USER_FACING = ("ConfigError", "ModelLoadError", "CheckpointError", "RewardFunctionError", "DatasetError",
               "RolloutCapacityError", "PhaseOOMError", "PlacementError", "WorkerDiedError",
               "WorkerError", "RemoteScoringError", "MissingDependencyError",
               "MegatronCheckpointError", "GroupClosedError", "RayInitError", "CompileError",
               "GraphCaptureError")


def run_with_actionable_errors(fn: Callable[[], object]) -> int:
    try:
        fn()
    except KeyboardInterrupt:
        print("hybridrl: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # re-raised below unless it is one of ours
        if type(err).__name__ not in USER_FACING:
            raise
        if type(err).__name__ == "ConfigError":  # the message is the whole story: which keys to change
            print(f"hybridrl: configuration error:\n{err}", file=sys.stderr)
            return 2
        print(f"hybridrl: {type(err).__name__}: {err}\n", file=sys.stderr)
        print("(traceback follows)", file=sys.stderr)
        traceback.print_exc()
        return 1
    return 0
