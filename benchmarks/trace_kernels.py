"""Device time per kernel in a profiled phase, and what a rank of an N-rank run spends beyond 1/N of the
one-process run: which kernels do not scale down (or are new) when the phase is split over ranks.

    python benchmarks/rl_step_bench.py ... --profile p1                                   # one process
    python benchmarks/rl_step_bench.py ... --hybridrl-override trainer.n_gpus_per_node=2 --profile p2
    python benchmarks/trace_kernels.py p2/step_N/rank0.update_actor.trace.json.gz \
        --baseline p1/step_N/controller.update_actor.trace.json.gz --ranks 2

Kernels are grouped by name with launch parameters cut off (`void f<...>(...)` -> `f`), so template
instances and calls from different sites add up. Per group: total ms, calls and mean µs; with a baseline,
also the baseline's ms / --ranks and the excess (this trace's ms minus that), largest excess first.
Kernel times overlap when streams run side by side (NCCL beside compute), so the totals can exceed the
phase's wall time; trace_gaps.py gives the busy/idle picture.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import emit  # noqa: E402
from benchmarks.trace_gaps import DEVICE_CATS, load_events  # noqa: E402

_TEMPLATE_OR_ARGS = re.compile(r"[<(]")


def kernel_group(name: str) -> str:
    """`void at::native::f<4, g>(char*)` -> `at::native::f`; plain names (Triton, nvjet) stay whole."""
    name = name.removeprefix("void ").strip()
    cut = _TEMPLATE_OR_ARGS.search(name)
    return name[:cut.start()] if cut else name


def kernel_times(path: str) -> tuple[Counter[str], Counter[str]]:
    """(µs, calls) per kernel group over the trace's device events (kernels, copies, memsets)."""
    micros: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for event in load_events(path):
        if event.get("cat") in DEVICE_CATS:
            group = kernel_group(event["name"])
            micros[group] += event["dur"]
            calls[group] += 1
    return micros, calls


def compare(path: str, baseline: str | None = None, ranks: int = 2, top: int = 30) -> dict[str, Any]:
    micros, calls = kernel_times(path)
    base = kernel_times(baseline)[0] if baseline else Counter()
    groups = set(micros) | set(base)
    rows = []
    for group in groups:
        row = {"kernel": group[:120], "ms": round(micros[group] / 1e3, 3), "calls": calls[group],
               "mean_us": round(micros[group] / calls[group], 2) if calls[group] else 0.0}
        if baseline:
            share = base[group] / ranks / 1e3
            row.update(baseline_ms_per_rank=round(share, 3), excess_ms=round(row["ms"] - share, 3))
        rows.append(row)
    key = "excess_ms" if baseline else "ms"
    rows.sort(key=lambda row: -row[key])
    result: dict[str, Any] = {"kernel_ms": round(sum(micros.values()) / 1e3, 3)}
    if baseline:
        result["baseline_kernel_ms_per_rank"] = round(sum(base.values()) / ranks / 1e3, 3)
        result["excess_kernel_ms"] = round(result["kernel_ms"] - result["baseline_kernel_ms_per_rank"], 3)
        result["least_excess"] = rows[-min(top // 3, len(rows)):][::-1]  # what scaled better than 1/ranks
    result["kernels"] = rows[:top]
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="a rank's chrome trace (.json or .json.gz) from torch.profiler")
    parser.add_argument("--baseline", default=None, help="the same phase's trace from the one-process run")
    parser.add_argument("--ranks", type=int, default=2, help="the rank count the baseline is divided by")
    parser.add_argument("--top", type=int, default=30, help="kernel groups to list")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.ranks < 1:
        parser.error(f"--ranks must be >= 1, got {args.ranks}")
    result = compare(args.trace, args.baseline, args.ranks, args.top)
    emit(result, args.out)
    return result


if __name__ == "__main__":
    main()
