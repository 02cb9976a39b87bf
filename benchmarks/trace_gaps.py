"""Where a profiled phase leaves the device idle: read a torch.profiler trace, report busy and idle time and the
largest idle gaps with what the host was doing meanwhile.

    python benchmarks/rl_step_bench.py ... --profile prof     # writes prof/step_N/<process>.<phase>.trace.json.gz
    python benchmarks/trace_gaps.py prof/step_N/rank0.update_actor.trace.json.gz [more traces] [--top 12]

Per trace (one JSON object with one entry per file): the phase window (first to last event), the device's
busy time (the union of kernel, memcpy and memset intervals over all streams), its idle time by gap size,
kernel time per stream and in NCCL kernels, and the `--top` largest gaps, each with the host events that
span it and the host ops (by time) that ran inside it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import emit  # noqa: E402

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
GAP_SIZES = ((20, "<20us"), (100, "20-100us"), (1000, "0.1-1ms"), (float("inf"), ">1ms"))


def load_events(path: str) -> list[dict]:
    """Complete ("X") events that have a duration, from a plain or gzipped chrome trace."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def busy_intervals(device: list[dict]) -> list[list[float]]:
    """The union of the events' [start, end) intervals, sorted."""
    merged: list[list[float]] = []
    for start, end in sorted((e["ts"], e["ts"] + e["dur"]) for e in device):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def idle_gaps(busy: list[list[float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """(start, end) of each stretch of [lo, hi) outside `busy`, largest first."""
    edges = [(lo, busy[0][0])] + [(a[1], b[0]) for a, b in zip(busy, busy[1:])] + [(busy[-1][1], hi)]
    return sorted((gap for gap in edges if gap[1] > gap[0]), key=lambda gap: gap[0] - gap[1])


def gap_size_label(us: float) -> str:
    return next(label for bound, label in GAP_SIZES if us < bound)


def describe_gap(host: list[dict], start: float, end: float, origin: float) -> dict[str, Any]:
    """Where the gap starts (ms after `origin`), the host events spanning most of it, and the host ops that
    ran inside it (ms, most first)."""
    length = end - start
    spanning = [e["name"][:60] for e in host if e["ts"] < end and e["ts"] + e["dur"] > start
                and e["dur"] > 0.5 * length]
    inside: Counter[str] = Counter()
    for e in host:
        if start <= e["ts"] < end:
            inside[e["name"][:60]] += min(e["dur"], end - e["ts"])
    return {"ms": round(length / 1e3, 3), "at_ms": round((start - origin) / 1e3, 3), "spanning": spanning[:5],
            "host_inside_ms": {name: round(us / 1e3, 3) for name, us in inside.most_common(5)}}


def summarize(path: str, top: int = 12) -> dict[str, Any]:
    events = load_events(path)
    device = [e for e in events if e.get("cat") in DEVICE_CATS]
    host = sorted((e for e in events if e.get("cat") in HOST_CATS), key=lambda e: e["ts"])
    if not device:
        return {"error": "no device events in this trace (a CPU run, or the profiler saw no CUDA activity)"}
    lo = min(e["ts"] for e in host + device)
    hi = max(e["ts"] + e["dur"] for e in host + device)
    busy = busy_intervals(device)
    busy_us = sum(end - start for start, end in busy)
    gaps = idle_gaps(busy, lo, hi)
    by_size: Counter[str] = Counter()
    for start, end in gaps:
        by_size[gap_size_label(end - start)] += end - start
    per_stream: defaultdict[Any, float] = defaultdict(float)
    for e in device:
        per_stream[str(e.get("tid"))] += e["dur"]
    largest = [describe_gap(host, start, end, lo) for start, end in gaps[:top]]
    return {"window_ms": round((hi - lo) / 1e3, 3), "device_busy_ms": round(busy_us / 1e3, 3),
            "device_idle_ms": round((hi - lo - busy_us) / 1e3, 3),
            "idle_ms_by_gap_size": {label: round(by_size[label] / 1e3, 3) for _, label in GAP_SIZES},
            "kernel_ms_by_stream": {k: round(v / 1e3, 3) for k, v in sorted(per_stream.items(), key=lambda kv: -kv[1])},
            "nccl_kernel_ms": round(sum(e["dur"] for e in device if "nccl" in e["name"].lower()) / 1e3, 3),
            "largest_gaps": largest}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", help="chrome traces (.json or .json.gz) from torch.profiler")
    parser.add_argument("--top", type=int, default=12, help="largest gaps to describe per trace")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result = {path: summarize(path, args.top) for path in args.traces}
    emit(result, args.out)
    return result


if __name__ == "__main__":
    main()
