"""The `hybridrl` library logger: one stderr handler added on first use; importing configures nothing."""

from __future__ import annotations

import logging

from hybridrl.logging.terminal import write_line

ROOT_NAME = "hybridrl"
_FORMAT = "[hybridrl] %(message)s"


class ConsoleHandler(logging.StreamHandler):
    """stderr, written around an open progress bar (terminal.py) so a log line never glues to the bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            write_line(self.format(record), self.stream)
        except Exception:  # noqa: BLE001 - logging's own contract: report through handleError, never raise
            self.handleError(record)


def _configure_once() -> logging.Logger:
    root = logging.getLogger(ROOT_NAME)
    if not getattr(root, "_hybridrl_configured", False):
        handler = ConsoleHandler()
        handler.setFormatter(logging.Formatter(_FORMAT))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        root.propagate = False  # our handler prints it; don't print twice if the user configured the root logger
        root._hybridrl_configured = True  # type: ignore[attr-defined]
    return root


def get_logger(name: str = ROOT_NAME) -> logging.Logger:
    """A logger under the `hybridrl` namespace (`"trainer"` → `hybridrl.trainer`), INFO and above by default."""
    _configure_once()
    if name != ROOT_NAME and not name.startswith(ROOT_NAME + "."):
        name = f"{ROOT_NAME}.{name}"
    return logging.getLogger(name)


def set_verbosity(level: int | str) -> None:
    """Set the level of every `hybridrl.*` logger, e.g. `set_verbosity("DEBUG")` or `set_verbosity(logging.WARNING)`."""
    if isinstance(level, str):
        resolved = logging.getLevelName(level.upper())
        if not isinstance(resolved, int):
            raise ValueError(f"unknown log level {level!r}; use DEBUG, INFO, WARNING, ERROR or CRITICAL")
        level = resolved
    _configure_once().setLevel(level)
