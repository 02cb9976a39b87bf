"""What a rank measures of its own phases: peak device memory, wall time, and (when asked) a profile.

The controller keeps the max over the ranks: `timing_s/<phase>` minus `timing_s/<phase>_rank` is what the
controller adds (sharding, pickling, transport) and rank imbalance. A worker in the controller's own process
(one-process runs) measures nothing: the controller's phases already cover that process, and two trackers
resetting one allocator's peak counter, or two profilers, would spoil each other's figures.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from hybridrl.utils.gc_time import gc_clock
from hybridrl.utils.memory import PhaseMemory, host_memory_metrics
from hybridrl.utils.profiling import ProfileSpec, StepProfiler


class RankPhases:
    def __init__(self, label: str, device: torch.device, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.memory = PhaseMemory(device if enabled else "cpu")  # on CPU it records nothing
        self.profiler = StepProfiler(label, device)  # global_profiler: started by the controller
        self.seconds: defaultdict[str, float] = defaultdict(float)  # wall time per phase since the last pop
        if enabled:
            gc_clock()  # timing_s/gc_rank from here on

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record the block's peak device memory and wall time under the trainer's phase `name`."""
        if not self.enabled:
            yield
            return
        start = time.perf_counter()
        try:
            with self.memory.phase(name), self.profiler.phase(name):
                yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def pop_metrics(self) -> dict[str, float]:
        """Since the last call: `perf/max_memory_allocated_gb[/<phase>]` (on CPU the process's peak resident
        set, as one process reports it), `timing_s/<phase>_rank` and `timing_s/gc_rank`, the seconds spent in
        Python's garbage collector."""
        if not self.enabled:
            return {}
        metrics = self.memory.pop_metrics() if self.memory.enabled else host_memory_metrics()
        metrics.update({f"timing_s/{phase}_rank": seconds for phase, seconds in self.seconds.items()})
        metrics["timing_s/gc_rank"] = gc_clock().end_step()
        self.seconds.clear()
        return metrics

    def start_profile(self, spec: ProfileSpec, step: int) -> None:
        if self.enabled:
            self.profiler.start(spec, step)

    def stop_profile(self, step: int) -> None:
        if self.enabled:
            self.profiler.stop(step)
