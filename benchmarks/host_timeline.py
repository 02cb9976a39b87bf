"""Where the host's time goes in the engine's request API: wall seconds and calls of chosen methods, and the
engine thread's gaps between steps (the time it waits for the event loop to hand it the next one).

    with HostTimeline.for_request_engine() as timeline:
        timeline.reset(); ...; timeline.snapshot()

Instrumentation for benchmarks only: each wrapped call pays two perf_counter reads.
"""

from __future__ import annotations

import functools
import gc
import time
from collections import defaultdict
from typing import Any


class HostTimeline:
    def __init__(self, targets: list[tuple[type, str]], step_target: tuple[type, str]) -> None:
        self.targets = targets
        self.step_target = step_target
        self._originals: list[tuple[type, str, Any]] = []
        self._gc_started: float | None = None
        self.reset()

    @classmethod
    def for_request_engine(cls) -> "HostTimeline":
        from hybridrl.rollout.engine.async_engine import AsyncLLMEngine
        from hybridrl.rollout.engine.decode_step import LaunchedStep
        from hybridrl.rollout.engine.llm_engine import LLMEngine
        from hybridrl.rollout.engine.model_runner import ModelRunner
        from hybridrl.rollout.engine.scheduler import Scheduler

        targets = [(LaunchedStep, "results"), (Scheduler, "postprocess"), (Scheduler, "admit"),
                   (Scheduler, "plan_burst"), (ModelRunner, "launch_prefill"), (ModelRunner, "launch_burst"),
                   (LLMEngine, "make_request"), (AsyncLLMEngine, "_apply_ops")]
        return cls(targets, (LLMEngine, "step"))

    def reset(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._last_step_end: float | None = None

    def snapshot(self) -> dict[str, Any]:
        return {name: {"s": round(self.seconds[name], 4), "calls": self.calls[name]} for name in sorted(self.seconds)}

    def _on_gc(self, phase: str, info: dict) -> None:
        """Collector pauses, per generation: a host-bound loop stops for each one."""
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started is not None:
            label = f"gc.collect generation {info['generation']}"
            self.seconds[label] += time.perf_counter() - self._gc_started
            self.calls[label] += 1
            self._gc_started = None

    def __enter__(self) -> "HostTimeline":
        gc.callbacks.append(self._on_gc)
        for owner, name in self.targets:
            self._patch(owner, name, self._timed)
        self._patch(*self.step_target, self._timed_step)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._on_gc)
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()

    def _patch(self, owner: type, name: str, wrapper) -> None:
        original = getattr(owner, name)
        self._originals.append((owner, name, original))
        setattr(owner, name, wrapper(original, f"{owner.__name__}.{name}"))

    def _timed(self, fn, label: str):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - start
                self.calls[label] += 1
        return timed

    def _timed_step(self, fn, label: str):
        timed = self._timed(fn, label)

        @functools.wraps(fn)
        def step(*args, **kwargs):
            if self._last_step_end is not None:
                self.seconds["engine thread waits between steps"] += time.perf_counter() - self._last_step_end
            try:
                return timed(*args, **kwargs)
            finally:
                self._last_step_end = time.perf_counter()
        return step
