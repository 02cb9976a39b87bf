"""The MLflow backend of rollout tracing, through MLflow's tracing API (`mlflow.start_span`): the one
module that imports mlflow for traces. Traces go where MLflow logs (MLFLOW_TRACKING_URI, else MLflow's
default store), into the experiment `trace.project_name`. MLflow exports traces asynchronously by default
(MLFLOW_ENABLE_ASYNC_TRACE_LOGGING); the queue is flushed when the agent loops close. verl also switches on
`mlflow.config.enable_async_logging()`, which changes how every MLflow run in the process logs metrics (the
trainer.logger=mlflow tracker's too), so it is left to the user here."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from hybridrl.logging.backends import MissingDependencyError

INSTALL = ("actor_rollout_ref.rollout.trace.backend=mlflow needs the mlflow package: install it with "
           "`pip install 'hybridrl[mlflow]'` (or mlflow-skinny), or set the key to null")


def import_mlflow() -> Any:
    try:
        import mlflow
    except ImportError as error:
        raise MissingDependencyError(INSTALL) from error
    return mlflow


class MlflowTraceBackend:
    def __init__(self, experiment: str):
        self.mlflow = import_mlflow()
        self.experiment_id = self.mlflow.set_experiment(experiment).experiment_id

    @contextlib.contextmanager
    def span(self, name: str, span_type: str, inputs: dict[str, Any]) -> Iterator[Any]:
        with self.mlflow.start_span(name=name, span_type=span_type) as span:
            span.set_inputs(inputs)
            yield span

    def tag_trace(self, tags: dict[str, str]) -> None:
        self.mlflow.update_current_trace(tags=tags)

    def flush(self) -> None:
        self.mlflow.flush_trace_async_logging()
