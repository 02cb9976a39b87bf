"""Experiment trackers selected by verl's `trainer.logger` list, fanned out by one `MultiTracker`."""

from __future__ import annotations

import numbers
from typing import Any, Mapping, Protocol, runtime_checkable

from hybridrl.logging.backends import OPTIONAL_BACKENDS, MissingDependencyError, install_hint, is_available
from hybridrl.utils.metrics import to_float

VALID_LOGGERS: tuple[str, ...] = ("console", "file", "tensorboard", "wandb", "mlflow", "swanlab")
# verl accepts these too; name them so the error says "not implemented" rather than "typo"
_VERL_ONLY_LOGGERS: tuple[str, ...] = ("vemlp_wandb", "clearml", "trackio")


@runtime_checkable
class Tracker(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def finish(self) -> None: ...


def normalize_logger_names(logger_names: list[str] | tuple[str, ...] | str | None) -> list[str]:
    """A bare string becomes a one-item list; duplicates collapse; unknown names raise ValueError."""
    if logger_names is None:
        return []
    names = [logger_names] if isinstance(logger_names, str) else list(logger_names)
    for name in names:
        if name in _VERL_ONLY_LOGGERS:
            raise ValueError(f"trainer.logger: {name!r} is a verl logger that hybridrl does not implement; "
                             f"use one of {list(VALID_LOGGERS)}")
        if name not in VALID_LOGGERS:
            raise ValueError(f"trainer.logger: unknown logger {name!r}; valid names are {list(VALID_LOGGERS)}")
    return list(dict.fromkeys(names))


def check_trackers_available(logger_names: list[str] | tuple[str, ...] | str | None) -> None:
    """Fail fast, before any model is loaded, if a configured tracker's package is missing or a name is unknown."""
    for name in normalize_logger_names(logger_names):
        if name in OPTIONAL_BACKENDS and not is_available(name):
            raise MissingDependencyError(install_hint(name))


def _plain_number(key: str, value: Any) -> float | int:
    if isinstance(value, numbers.Integral):  # bools included: logged as 0/1
        return int(value)
    try:
        return to_float(value)
    except TypeError as error:
        raise TypeError(f"metric {key!r}: trackers log numbers only, got {type(value).__name__}; {error}") from error


class MultiTracker:
    """Sends each step's metrics (converted to plain ints/floats once) to every configured tracker."""

    def __init__(self, trackers: Mapping[str, Tracker]) -> None:
        self.trackers = dict(trackers)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        plain = {key: _plain_number(key, value) for key, value in metrics.items()}
        for tracker in self.trackers.values():
            tracker.log(plain, step)

    def add(self, name: str, tracker: Tracker) -> None:
        """Another tracker, logged to after the configured ones (the run's console: logging/run_console.py)."""
        if name in self.trackers:
            raise ValueError(f"a tracker named {name!r} is already attached")
        self.trackers[name] = tracker

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        """Validation samples (trainer.log_val_generations) to every tracker that shows text."""
        for tracker in self.trackers.values():
            log_generations = getattr(tracker, "log_generations", None)
            if log_generations is not None:
                log_generations(samples, step)

    def finish(self) -> None:
        # finish every tracker even if one fails, so files get closed; then report the first failure
        first_error: BaseException | None = None
        for tracker in self.trackers.values():
            try:
                tracker.finish()
            except Exception as error:  # noqa: BLE001 - re-raised below
                first_error = first_error or error
        if first_error is not None:
            raise first_error


def _build_one(name: str, project_name: str, experiment_name: str, local_dir: str, config_dict: dict) -> Tracker:
    # backends are imported here so `import hybridrl.logging` stays light
    from hybridrl.logging import backends
    from hybridrl.logging.console import ConsoleTracker
    from hybridrl.logging.file_tracker import FileTracker

    if name == "console":
        return ConsoleTracker()
    if name == "file":
        return FileTracker(local_dir)
    if name == "tensorboard":
        return backends.TensorBoardTracker(local_dir)
    remote = {"wandb": backends.WandbTracker, "mlflow": backends.MlflowTracker, "swanlab": backends.SwanlabTracker}
    return remote[name](project_name, experiment_name, config_dict)


def build_trackers(logger_names: list[str] | str, *, project_name: str, experiment_name: str,
                   local_dir: str, config_dict: dict) -> MultiTracker:
    """One tracker per name in verl's `trainer.logger` (`console`, `file`, `tensorboard`, `wandb`, `mlflow`, `swanlab`).

    `file` and `tensorboard` write under `local_dir` (`metrics.jsonl`, `tensorboard/`).
    """
    names = normalize_logger_names(logger_names)
    check_trackers_available(names)
    built: dict[str, Tracker] = {}
    try:
        for name in names:
            built[name] = _build_one(name, project_name, experiment_name, local_dir, config_dict)
    except BaseException:
        MultiTracker(built).finish()  # close what was already opened before re-raising
        raise
    return MultiTracker(built)
