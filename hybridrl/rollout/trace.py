"""Rollout tracing (verl's `actor_rollout_ref.rollout.trace.*`): each sampled agent-loop trajectory becomes
one trace in a tracing backend (MLflow), a root `agent_loop` span holding one child span per generate call
(`generate`), tool call (`tool:<name>`) and simulated-user reply (`interaction:<name>`), with their inputs
and outputs; `token2text` adds the decoded text beside the token ids.

Each trace is tagged as verl tags it (`step`, `sample_index`, `rollout_n`, `validate`, `experiment_name`),
so `tags.step = '3'` filters one step in the MLflow UI. `max_samples_per_step_per_worker` caps the traced
prompts per generate call of each rollout rank (all `n` samples of a chosen prompt are traced, as in verl).

Code that is not an agent loop reaches the current trajectory through `trace_span` or verl's
`rollout_trace_op` decorator (also importable as `verl.utils.rollout_trace.rollout_trace_op` by interaction
and tool files written for verl); outside a traced trajectory both do nothing.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import random
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, Sequence

from hybridrl.config.errors import ConfigError

KEY = "actor_rollout_ref.rollout.trace"
BACKENDS = ("mlflow",)


class TraceSpan(Protocol):
    def set_outputs(self, outputs: Any) -> None: ...


class TraceBackend(Protocol):
    """What a tracing backend gives: nested spans (the first one of a trajectory is its trace's root)."""

    def span(self, name: str, span_type: str, inputs: dict[str, Any]) -> contextlib.AbstractContextManager[TraceSpan]: ...

    def tag_trace(self, tags: dict[str, str]) -> None: ...

    def flush(self) -> None: ...


class _NoSpan:
    def set_outputs(self, outputs: Any) -> None:
        """Untraced: nothing to record."""


NO_SPAN = _NoSpan()
_ACTIVE: ContextVar["TraceBackend | None"] = ContextVar("hybridrl_rollout_trace", default=None)


def tracing() -> bool:
    """Whether the running code is inside a traced trajectory (build span inputs only then)."""
    return _ACTIVE.get() is not None


@contextlib.contextmanager
def trace_span(name: str, inputs: dict[str, Any] | None = None, span_type: str = "UNKNOWN") -> Iterator[TraceSpan]:
    """A child span of the current traced trajectory; a no-op span outside one."""
    backend = _ACTIVE.get()
    if backend is None:
        yield NO_SPAN
        return
    with backend.span(name, span_type, inputs or {}) as span:
        yield span


def rollout_trace_op(func: Callable) -> Callable:
    """verl's decorator: a span named after the function, its bound arguments as inputs and its result as
    outputs, when called inside a traced trajectory."""

    def inputs_of(args: tuple, kwargs: dict) -> dict[str, Any]:
        bound = inspect.signature(func).bind(*args, **kwargs)
        bound.apply_defaults()
        return {key: value for key, value in bound.arguments.items() if key != "self"}

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def traced_async(*args: Any, **kwargs: Any) -> Any:
            if _ACTIVE.get() is None:
                return await func(*args, **kwargs)
            with trace_span(func.__qualname__, inputs_of(args, kwargs)) as span:
                result = await func(*args, **kwargs)
                span.set_outputs(result)
            return result

        return traced_async

    @functools.wraps(func)
    def traced(*args: Any, **kwargs: Any) -> Any:
        if _ACTIVE.get() is None:
            return func(*args, **kwargs)
        with trace_span(func.__qualname__, inputs_of(args, kwargs)) as span:
            result = func(*args, **kwargs)
            span.set_outputs(result)
        return result

    return traced


@dataclass(frozen=True)
class TraceSettings:
    """`actor_rollout_ref.rollout.trace` (project/experiment names follow trainer.project_name/experiment_name)."""

    backend: str | None = None
    token2text: bool = False
    max_samples_per_step_per_worker: int | None = None
    project_name: str | None = None
    experiment_name: str | None = None

    @classmethod
    def from_config(cls, rollout_config: Any) -> "TraceSettings":
        trace = getattr(rollout_config, "trace", None)
        if trace is None:
            return cls()
        return cls(trace.backend, bool(trace.token2text), trace.max_samples_per_step_per_worker, trace.project_name,
                   trace.experiment_name)


def check_trace_settings(settings: TraceSettings) -> None:
    """The trace keys' rules, before anything is built (a ConfigError names the key and the fix)."""
    if settings.backend is None:
        return
    if settings.backend == "weave":
        raise ConfigError(f"{KEY}.backend=weave: W&B Weave tracing is not supported (its client pulls in the whole "
                          f"wandb stack); use {KEY}.backend=mlflow (`pip install 'hybridrl[mlflow]'`), whose "
                          f"traces hold the same spans, or null")
    if settings.backend not in BACKENDS:
        raise ConfigError(f"{KEY}.backend={settings.backend!r} is not a trace backend; use mlflow or null")
    cap = settings.max_samples_per_step_per_worker
    if cap is not None and cap < 1:
        raise ConfigError(f"{KEY}.max_samples_per_step_per_worker={cap} must be null (trace every prompt) or >= 1")


def build_trace_backend(settings: TraceSettings) -> TraceBackend | None:
    """The configured backend (None when tracing is off); a missing package raises MissingDependencyError."""
    check_trace_settings(settings)
    if settings.backend is None:
        return None
    from hybridrl.rollout.trace_mlflow import MlflowTraceBackend

    return MlflowTraceBackend(settings.project_name or "hybridrl")


class RolloutTracer:
    """One per agent-loop manager: picks the trajectories to trace and opens their root spans."""

    def __init__(self, settings: TraceSettings, tokenizer: Any, backend: TraceBackend | None = None):
        self.settings = settings
        self.tokenizer = tokenizer
        self.backend = backend if backend is not None else build_trace_backend(settings)

    @property
    def enabled(self) -> bool:
        return self.backend is not None

    def traced_rows(self, sample_indices: Sequence[Any], seed: str) -> set[int]:
        """Rows to trace: those of at most `max_samples_per_step_per_worker` distinct samples (prompts), drawn
        with `seed` (so a resumed run traces the same ones); every row when uncapped."""
        if not self.enabled:
            return set()
        cap = self.settings.max_samples_per_step_per_worker
        distinct = list(dict.fromkeys(sample_indices))
        if cap is None or cap >= len(distinct):
            return set(range(len(sample_indices)))
        chosen = set(random.Random(seed).sample(distinct, cap))
        return {row for row, sample in enumerate(sample_indices) if sample in chosen}

    @contextlib.contextmanager
    def trajectory(self, traced: bool, tags: dict[str, Any], inputs: dict[str, Any]) -> Iterator[TraceSpan]:
        """The trajectory's root span (`agent_loop`), tagged; its child spans attach to it through a context
        variable, so concurrent trajectories (asyncio tasks) never mix."""
        if not traced or self.backend is None:
            yield NO_SPAN
            return
        token = _ACTIVE.set(self.backend)
        try:
            with self.backend.span("agent_loop", "AGENT", inputs) as root:
                self.backend.tag_trace({key: str(value) for key, value in
                                        {**tags, "experiment_name": self.settings.experiment_name}.items()})
                yield root
        finally:
            _ACTIVE.reset(token)

    def text(self, token_ids: Sequence[int]) -> dict[str, str]:
        """`{"text": decoded}` when token2text is on (special tokens kept: the template is part of the story)."""
        if not self.settings.token2text:
            return {}
        return {"text": self.tokenizer.decode(list(token_ids), skip_special_tokens=False)}

    def close(self) -> None:
        if self.backend is not None:
            self.backend.flush()
