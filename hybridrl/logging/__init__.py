"""Trackers (`trainer.logger`), the console (step line, banner, progress, summary, validation samples), rollout
dumps and `hybridrl plot`.

Names are re-exported lazily so `import hybridrl.logging` imports nothing heavy (no tqdm, matplotlib, wandb).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "Tracker": "hybridrl.logging.tracker",
    "MultiTracker": "hybridrl.logging.tracker",
    "build_trackers": "hybridrl.logging.tracker",
    "check_trackers_available": "hybridrl.logging.tracker",
    "VALID_LOGGERS": "hybridrl.logging.tracker",
    "MissingDependencyError": "hybridrl.logging.backends",
    "ConsoleTracker": "hybridrl.logging.console",
    "order_metrics": "hybridrl.logging.console",
    "format_console_line": "hybridrl.logging.console",
    "format_step_line": "hybridrl.logging.console",
    "RunConsole": "hybridrl.logging.run_console",
    "RunFacts": "hybridrl.logging.banner",
    "format_banner": "hybridrl.logging.banner",
    "log_val_generations": "hybridrl.logging.val_generations",
    "select_val_generations": "hybridrl.logging.val_generations",
    "FileTracker": "hybridrl.logging.file_tracker",
    "read_metrics_jsonl": "hybridrl.logging.file_tracker",
    "StepProgress": "hybridrl.logging.progress",
    "plot_metrics": "hybridrl.logging.plot",
    "main_plot": "hybridrl.logging.plot",
    "get_logger": "hybridrl.logging.log",
    "set_verbosity": "hybridrl.logging.log",
    "dump_rollout_jsonl": "hybridrl.logging.rollout_dump",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hybridrl.logging' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
