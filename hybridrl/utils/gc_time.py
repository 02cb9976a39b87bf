"""Python's garbage collector during training: the time it takes, and start-up objects kept out of its way.

A full (generation-2) collection walks every object the collector tracks. A process holding torch,
transformers and a model tracks ~400k objects after start-up, and one full collection of them took 370 ms
on the 2-core dev box: a pause that lands in whichever phase allocates the object that triggers it (the
engine's per-token bookkeeping allocates many). Start-up objects live until the process ends, so after
start-up they are collected once and frozen (`gc.freeze`, as SGLang does after its warm-up): later
collections walk only what training allocates. The first steps build more objects that live as long:
torch.compile's graphs and guards, CUDA-graph captures, caches (one H200, the issue's workload, frozen at
start-up only: 51 ms per step in the collector); so what is alive after each of the first two steps
(`WARM_UP_POPS`) is frozen as well (then 17 ms per step). `timing_s/gc` (controller) and `timing_s/gc_rank` (the slowest
worker rank) report the seconds spent collecting per step.

A full collection also visits every item of every list it walks: the engine's in-flight sequences hold their
token ids and log-probs in lists, which live across steps in asynchronous training (parked requests). 4096 lists
of 2000 ints and 4096 of 2000 floats cost 0.33 s per full collection on the 2-core dev box; on one H200
(async_bench, colocate_async at S=8) 22 full collections took 4.4 s of a 4-step run, `timing_s/gc` 0.47 s per
step against 0.06 s in sync. Python runs a full collection after every 10 collections of the middle generation
(`gc.set_threshold`'s third value); during training it runs one after every `FULL_COLLECTION_EVERY`. Cyclic
garbage that reaches the oldest generation waits longer for it; everything else is freed by reference counting.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager


WARM_UP_POPS = 2  # a rank's first pop ends its start-up, its second the first step; the controller's: steps 1, 2
FULL_COLLECTION_EVERY = 100  # middle-generation collections between full ones (Python's default: 10)


class GCClock:
    """Seconds spent in the collector since the last `pop`, through `gc.callbacks`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.pops = 0
        self._started: float | None = None
        gc.callbacks.append(self._on_collection)

    def _on_collection(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self._started = None

    def end_step(self) -> float:
        """Seconds in the collector since the last call (once per step); the first `WARM_UP_POPS` calls also
        freeze what is alive (no collection first: see `startup_objects_frozen`)."""
        self.pops += 1
        if self.pops <= WARM_UP_POPS:
            gc.freeze()
        seconds, self.seconds = self.seconds, 0.0
        return seconds


_CLOCK: GCClock | None = None


def gc_clock() -> GCClock:
    """This process's clock, installed on first use."""
    global _CLOCK
    if _CLOCK is None:
        _CLOCK = GCClock()
    return _CLOCK


def freeze_startup_objects() -> None:
    """Collect the start-up garbage (anything frozen already included), then move every object alive now out of
    future collections, for the rest of the process (worker ranks: their start-up objects live until they exit)."""
    gc.unfreeze()  # a worker's construction may have ended a first "step" (`end_step`) and frozen its garbage
    gc.collect()
    gc.freeze()
    _rarer_full_collections()


@contextmanager
def startup_objects_frozen() -> Iterator[None]:
    """Every object alive now kept out of collections for a block, with rarer full collections, and given back to
    the collector (at its thresholds before) after it (the trainer in a process that outlives the run, e.g. a
    notebook or a test session: what the run leaves behind must be collectable again). No collection first: a
    process that holds more than the run (a test session's ~1M objects) would pay a full one per run, and garbage
    frozen here is collected after."""
    gc.freeze()
    thresholds = _rarer_full_collections()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def _rarer_full_collections() -> tuple[int, int, int]:
    """Full collections after `FULL_COLLECTION_EVERY` middle-generation ones (never more often than set before);
    the thresholds before."""
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], max(thresholds[2], FULL_COLLECTION_EVERY))
    return thresholds
