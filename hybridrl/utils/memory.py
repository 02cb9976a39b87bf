"""Peak device memory per phase of the RL step: `perf/max_memory_allocated_gb/<phase>`.

One process-wide peak says how close a run is to OOM but not which phase to shrink; the per-phase
peaks do (gen holds the KV cache, update_actor the activations and optimizer state). The CUDA caching
allocator has one peak counter, so each phase resets it on entry and reads it on exit. To keep the
step's overall peak and nested phases correct despite those resets, every reading is folded into
the overall maximum and into every phase still open.

On CPU (or without CUDA) nothing is recorded: `metrics()` is empty and the RSS-based
`perf/max_memory_allocated_gb` (`host_memory_metrics` below) stays the figure; host RSS has no resettable
peak. With worker ranks each rank keeps its own tracker and the controller takes the max (`max_merge`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

GIB = 2 ** 30
PREFIX = "perf/max_memory_allocated_gb"

_external: dict[int, list[int]] = {}  # device index -> [bytes mapped now, peak since the last reset]


def _external_of(device: torch.device) -> list[int]:
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _external.setdefault(index, [0, 0])


def external_bytes_changed(device: torch.device, delta: int) -> None:
    """Record `delta` bytes mapped (> 0) or unmapped (< 0) on a CUDA device outside PyTorch's allocator."""
    entry = _external_of(device)
    entry[0] += delta
    entry[1] = max(entry[1], entry[0])


def external_bytes(device: torch.device) -> int:
    """Bytes mapped outside PyTorch's allocator on a CUDA device now."""
    return _external_of(device)[0]


def allocated_bytes(device: torch.device) -> int:
    """PyTorch's allocated bytes on a CUDA device plus the bytes mapped outside it."""
    return torch.cuda.memory_allocated(device) + external_bytes(device)


def peak_allocated_bytes(device: torch.device) -> int:
    """Peak since `reset_peak`: PyTorch's plus that of the memory mapped outside it."""
    return torch.cuda.max_memory_allocated(device) + _external_of(device)[1]


def reset_peak(device: torch.device) -> None:
    torch.cuda.reset_peak_memory_stats(device)
    entry = _external_of(device)
    entry[1] = entry[0]


class PhaseMemory:
    """Usage: `with tracker.phase("gen"): ...` per phase, then `tracker.pop_metrics()` once per step."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.enabled = self.device.type == "cuda" and torch.cuda.is_available()
        self.peaks: dict[str, int] = {}  # bytes, max over this step's entries of the phase
        self.overall = 0
        self._open: list[tuple[str, int]] = []  # (phase, running peak) innermost last
        if self.enabled:  # measure from here: earlier work in the process (loading, other runs) is not a step's
            reset_peak(self.device)

    def _read_and_reset(self) -> int:
        """Peak since the last reset (folded into every open phase and the overall); then reset."""
        peak = peak_allocated_bytes(self.device)
        self.overall = max(self.overall, peak)
        self._open = [(name, max(running, peak)) for name, running in self._open]
        reset_peak(self.device)
        return peak

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Record the peak allocated memory of the block under `name` (max over repeated entries)."""
        if not self.enabled:
            yield
            return
        self._read_and_reset()
        self._open.append((name, allocated_bytes(self.device)))
        try:
            yield
        finally:
            self._read_and_reset()
            closed, peak = self._open.pop()
            assert closed == name, "phases must nest"
            self.peaks[name] = max(self.peaks.get(name, 0), peak)

    def metrics(self) -> dict[str, float]:
        """`perf/max_memory_allocated_gb/<phase>` per phase plus the overall `perf/max_memory_allocated_gb`."""
        if not self.enabled:
            return {}
        overall = max(self.overall, peak_allocated_bytes(self.device))
        out = {f"{PREFIX}/{name}": peak / GIB for name, peak in self.peaks.items()}
        out[PREFIX] = overall / GIB
        return out

    def pop_metrics(self) -> dict[str, float]:
        """`metrics()`, then start the next step from zero."""
        out = self.metrics()
        self.peaks.clear()
        self.overall = 0
        if self.enabled and not self._open:
            reset_peak(self.device)
        return out


def host_memory_metrics() -> dict[str, float]:
    """On CPU the training device is host RAM: the process's peak resident set stands for device memory
    (on CUDA, `PhaseMemory` reports per-phase and overall peaks instead)."""
    import resource

    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {"perf/max_memory_allocated_gb": peak_gb, "perf/cpu_memory_used_gb": peak_gb}


def max_merge(*metric_dicts: dict[str, float]) -> dict[str, float]:
    """One dict of peaks: per key the max over the given dicts (processes, ranks, replicas)."""
    out: dict[str, float] = {}
    for metrics in metric_dicts:
        for key, value in metrics.items():
            out[key] = max(out.get(key, value), value)
    return out
