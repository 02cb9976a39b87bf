"""Trackers backed by optional packages (tensorboard, wandb, mlflow, swanlab), each imported inside one function."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
from types import ModuleType
from typing import Any

# logger name → (importable modules, any one suffices; the pip extra that installs one)
OPTIONAL_BACKENDS: dict[str, tuple[tuple[str, ...], str]] = {
    "tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"),
    "wandb": (("wandb",), "wandb"),
    "mlflow": (("mlflow",), "mlflow"),
    "swanlab": (("swanlab",), "swanlab"),
}


class MissingDependencyError(ImportError):
    """An optional package needed by the configured `trainer.logger` is not installed."""


def install_hint(logger_name: str) -> str:
    modules, extra = OPTIONAL_BACKENDS[logger_name]
    return (f"trainer.logger includes {logger_name!r} but the {modules[0]} package is not installed; "
            f"install it with `pip install 'hybridrl[{extra}]'` or remove {logger_name!r} from trainer.logger")


def check_trace_backend_available(backend: str | None) -> None:
    """`actor_rollout_ref.rollout.trace.backend=mlflow` needs mlflow (or mlflow-skinny) importable."""
    if backend == "mlflow" and not is_available("mlflow"):
        raise MissingDependencyError(
            "actor_rollout_ref.rollout.trace.backend=mlflow but the mlflow package is not installed; install it with "
            "`pip install 'hybridrl[mlflow]'` (or `pip install mlflow-skinny`), or set the key to null")


def is_available(logger_name: str) -> bool:
    """Whether the backend's package can be imported, without importing it (find_spec only)."""
    modules, _ = OPTIONAL_BACKENDS[logger_name]
    return any(importlib.util.find_spec(module) is not None for module in modules)


def _import(logger_name: str, module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingDependencyError(install_hint(logger_name)) from error


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


class TensorBoardTracker:
    """Scalars under `<local_dir>/tensorboard`, via torch.utils.tensorboard or else tensorboardX."""

    def __init__(self, local_dir: str) -> None:
        self.log_dir = os.path.join(local_dir, "tensorboard")
        os.makedirs(self.log_dir, exist_ok=True)
        if importlib.util.find_spec("tensorboard") is not None:
            writer_module = _import("tensorboard", "torch.utils.tensorboard")
        else:
            writer_module = _import("tensorboard", "tensorboardX")
        self._writer = writer_module.SummaryWriter(log_dir=self.log_dir)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        from hybridrl.logging.val_generations import markdown_generations

        self._writer.add_text("val/generations", markdown_generations(samples, step), global_step=step)
        self._writer.flush()

    def finish(self) -> None:
        self._writer.close()


class WandbTracker:
    """One wandb run named `experiment_name` in `project_name`; config logged once at init."""

    def __init__(self, project_name: str, experiment_name: str, config_dict: dict[str, Any]) -> None:
        self._wandb = _import("wandb", "wandb")
        self._wandb.init(project=project_name, name=experiment_name, config=config_dict)
        self._generation_rows: list[list[Any]] = []

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._wandb.log(data=metrics, step=step)

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        """verl's table: one row per validation (step, input_i, output_i, score_i), re-logged whole each time
        (a logged wandb.Table cannot grow)."""
        columns = ["step"] + [f"{name}_{i + 1}" for i in range(len(samples)) for name in ("input", "output", "score")]
        self._generation_rows.append([step] + [value for sample in samples for value in sample])
        width = len(columns)
        rows = [row for row in self._generation_rows if len(row) == width]  # a change of N starts a new table
        self._wandb.log({"val/generations": self._wandb.Table(columns=columns, data=rows)}, step=step)

    def finish(self) -> None:
        self._wandb.finish(exit_code=0)


def sanitize_mlflow_key(key: str) -> str:
    # MLflow accepts only [A-Za-z0-9_-. /:] in metric names; verl keys carry "@" (val-core/.../mean@1)
    return re.sub(r"[^A-Za-z0-9_\-. /:]", "_", key.replace("@", "_at_"))


class MlflowTracker:
    """An MLflow run in experiment `project_name`; MLFLOW_TRACKING_URI is honoured by mlflow itself."""

    def __init__(self, project_name: str, experiment_name: str, config_dict: dict[str, Any]) -> None:
        self._mlflow = _import("mlflow", "mlflow")
        self._mlflow.set_experiment(project_name)
        self._mlflow.start_run(run_name=experiment_name)
        self._mlflow.log_params({sanitize_mlflow_key(k): v for k, v in _flatten(config_dict).items()})

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._mlflow.log_metrics({sanitize_mlflow_key(k): v for k, v in metrics.items()}, step=step)

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        """verl's artifact: `val_step<step>.json`, a list of {input, output, score}."""
        import json
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, f"val_step{step}.json")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump([{"input": i, "output": o, "score": s} for i, o, s in samples], handle)
            self._mlflow.log_artifact(path)

    def finish(self) -> None:
        self._mlflow.end_run()


class SwanlabTracker:
    """A SwanLab run; SWANLAB_API_KEY, SWANLAB_LOG_DIR and SWANLAB_MODE are read as in verl."""

    def __init__(self, project_name: str, experiment_name: str, config_dict: dict[str, Any]) -> None:
        self._swanlab = _import("swanlab", "swanlab")
        api_key = os.environ.get("SWANLAB_API_KEY")
        if api_key:
            self._swanlab.login(api_key)
        self._swanlab.init(project=project_name, experiment_name=experiment_name, config=config_dict,
                           logdir=os.environ.get("SWANLAB_LOG_DIR", "swanlog"),
                           mode=os.environ.get("SWANLAB_MODE", "cloud"))

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._swanlab.log(data=metrics, step=step)

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        table = self._swanlab.echarts.Table()
        table.add(headers=["step", "input", "output", "score"], rows=[[step, *sample] for sample in samples])
        self._swanlab.log({"val/generations": table}, step=step)

    def finish(self) -> None:
        self._swanlab.finish()
