"""Largest n x batch each memory mode fits on one GPU: one RL step of rl_step_bench's workload per trial.

    python benchmarks/capacity_bench.py --modes hybrid --response-length 1024 --out capacity.json   # H200
    python benchmarks/capacity_bench.py --quick --start-prompts 4 --max-prompts 8 --granularity 4    # CPU smoke run

For each mode (`hybrid`: KV cache only during generation; `separate`: KV cache reserved through training)
a trial runs one RL step at `prompts x n` responses with `rollout.max_num_seqs` = that batch, so the whole
batch must generate in one wave, as TRL's `generation_batch_size` does: the KV cache grows with the batch.
A trial fits when the step completes with no preempted sequence (preemption means the KV cache could not
hold the batch at once, the engine's way of not running out of memory). The search doubles from
--start-prompts until two trials fit, jumps to the size their memory figures predict (KV bytes per sequence
against the memory left beside the mode's non-KV peak, both lines through the two trials, and against the
engine's gpu_memory_utilization budget), checks one granularity step above it, and bisects or gallops when
the prediction is off. Every trial is a fresh
`rl_step_bench.py --steps 1` subprocess, so a failed trial leaves no memory behind. A trial that fails for
another reason, times out or would run past --time-budget stops that mode's search and is reported as such,
never counted as a fit or an out-of-memory.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
GSM8K_2048 = HERE / "data" / "gsm8k_train_2048.jsonl"
OOM_MARKERS = ("out of memory", "outofmemoryerror")
# Of device memory a prediction plans for. H200, session 5: a separate-mode step at 8,576 sequences failed
# to allocate 0.5 GiB with 136.5 GiB allocated and 2 GiB reserved but fragmented (0.98 x 139.8 = 137.0).
USABLE_FRACTION = 0.98


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="hybrid,separate")
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--response-length", type=int, default=1024)
    parser.add_argument("--start-prompts", type=int, default=64)
    parser.add_argument("--max-prompts", type=int, default=2048, help="at most the rows of --gsm8k")
    parser.add_argument("--granularity", type=int, default=16, help="bisect down to this many prompts")
    parser.add_argument("--micro-batch", type=int, default=None, help="rows per forward, default 64 (quick: 4)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=1.0,
                        help="high so that device memory, not the engine's budget, bounds each mode")
    parser.add_argument("--trial-timeout", type=int, default=900, help="seconds per trial")
    parser.add_argument("--time-budget", type=float, default=None, help="seconds for each mode's search")
    parser.add_argument("--gsm8k", default=str(GSM8K_2048))
    parser.add_argument("--quick", action="store_true", help="toy shapes on CPU (smoke test of the search)")
    parser.add_argument("--hybridrl-override", action="append", default=[],
                        help="extra verl override for every trial (repeatable), e.g. ...use_torch_compile=false")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.micro_batch = args.micro_batch or (4 if args.quick else 64)
    return args


Verdict = bool | None  # True: fit, False: out of memory (or preempted), None: failed otherwise


def largest_fit(fits: Callable[[int], Verdict], start: int, limit: int, granularity: int,
                predict: Callable[[int], int | None] | None = None) -> dict[str, Any]:
    """The largest size in [start, limit] that fits, to within `granularity`. Without `predict`: double from
    `start` until a size does not fit, then bisect. `predict(size)`, asked after each fit, names the size
    the trials' figures say is the largest fit, or None (keep doubling): the search goes there (rounded
    down to the granularity), then gallops up from the last fit (one granularity step, then doubling
    steps) until a size does not fit, and bisects."""
    good, bad, size, step = None, None, start, granularity
    while size is not None:
        verdict = fits(size)
        if verdict is None:
            return {"largest_fit": good, "smallest_oom": bad, "stopped_by_error_at": size}
        if verdict:
            good = size
        else:
            bad = size
        if bad is not None:
            size = _bisect(good, bad, granularity)
        elif predict is None:
            size = _capped(good * 2, good, limit)
        else:
            size, step = _guided(good, predict(good), step, granularity)
            size = _capped(size, good, limit)
    return {"largest_fit": good, "smallest_oom": bad, "stopped_by_error_at": None}


def _bisect(good: int | None, bad: int, granularity: int) -> int | None:
    if good is None:
        return None  # the smallest size did not fit
    middle = (good + bad) // 2 // granularity * granularity
    return None if bad - good <= granularity or middle in (good, bad) else middle


def _guided(good: int, prediction: int | None, step: int, granularity: int) -> tuple[int, int]:
    """Double while there is no prediction; the predicted size when it lies above the last fit; else a
    galloping step up from the last fit."""
    if prediction is None:
        return good * 2, step
    target = prediction // granularity * granularity
    return (target, step) if target > good else (good + step, step * 2)


def _capped(size: int, good: int, limit: int) -> int | None:
    return min(size, limit) if good < limit else None


def trial_command(args, mode: str, num_prompts: int, out: Path) -> list[str]:
    cmd = [sys.executable, str(HERE / "rl_step_bench.py"), "--only", mode, "--num-prompts", str(num_prompts),
           "--n", str(args.n), "--response-length", str(args.response_length), "--steps", "1",
           "--warmup-steps", "0", "--micro-batch", str(args.micro_batch), "--gsm8k", args.gsm8k,
           "--gpu-memory-utilization", str(args.gpu_memory_utilization), "--out", str(out)]
    cmd += ["--quick"] if args.quick else []
    return cmd + [arg for override in args.hybridrl_override for arg in ("--hybridrl-override", override)]


def run_trial(args, mode: str, num_prompts: int, log: list[dict[str, Any]], deadline: float) -> Verdict:
    """One RL step at `num_prompts` x n in a subprocess: True (fit), False (out of memory or preempted),
    None (anything else: an error, a timeout, no time left)."""
    entry: dict[str, Any] = {"mode": mode, "num_prompts": num_prompts, "sequences": num_prompts * args.n}
    log.append(entry)
    timeout = min(args.trial_timeout, deadline - time.monotonic())
    if timeout < 30:
        entry["result"] = "not run: --time-budget spent"
        return None
    with tempfile.TemporaryDirectory(prefix="capacity_") as tmp:
        out = Path(tmp) / "step.json"
        try:
            proc = subprocess.run(trial_command(args, mode, num_prompts, out), capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            entry["result"] = f"timeout after {timeout:.0f} s"
            return None
        result = json.loads(out.read_text())["hybridrl"].get(mode, {}) if out.exists() else {}
    entry.update(trial_figures(result))
    verdict, entry["result"] = judge(proc, result)
    if verdict is None:
        entry["error_tail"] = proc.stderr[-1500:]
    elif not verdict and entry["result"] == "out of memory":
        entry["oom_line"] = next((line for line in proc.stderr.splitlines() if "out of memory" in line.lower()), None)
    return verdict


def judge(proc: subprocess.CompletedProcess, result: dict[str, Any]) -> tuple[Verdict, str]:
    if proc.returncode == 0 and "step_s" in result:
        preempted = result.get("rollout/num_preempted", 0.0)
        return (True, "fit") if not preempted else (False, f"preempted {preempted:.0f} sequences (KV cache full)")
    text = (proc.stderr + json.dumps(result)).lower()
    return (False, "out of memory") if any(marker in text for marker in OOM_MARKERS) else (None, "error")


def trial_figures(result: dict[str, Any]) -> dict[str, Any]:
    peaks = result.get("peak_memory_gb") or {}
    return {"step_s": result.get("step_s"), "peak_memory_gb": peaks.get("perf/max_memory_allocated_gb"),
            "phase_peaks_gb": {k.rsplit("/", 1)[-1]: v for k, v in peaks.items()
                               if k != "perf/max_memory_allocated_gb"},
            "kv_cache_gb": result.get("kv_cache_gb"), "kv_budget_gb": result.get("kv_budget_gb"),
            "device_total_gb": result.get("device_total_gb"),
            "kv_during_training": result.get("kv_cache_during_training"),
            "num_preempted": result.get("rollout/num_preempted"),
            "kv_peak_usage": result.get("rollout/kv_cache_peak_usage_max")}


def predicted_prompts(fits: list[dict[str, Any]], n: int) -> int | None:
    """Prompts at which the two largest fits' figures, as lines over sequences, reach a limit (None with
    fewer than two fits or without CUDA figures):
    - preemption: the KV blocks in use at the peak (`rollout/kv_cache_peak_usage_max` of the cache; a
      prompt's blocks are shared by its n samples) reach the engine's budget, as the larger fit reported
      it (H200: 135.2, 132.6, 130.8, 130.2 GB at 512, 1,024, 7,168, 9,216 sequences: no line);
    - memory: the cache as allocated (sized for max_num_seqs full-length sequences, capped by the budget)
      plus the mode's non-KV peak (generation's in hybrid mode; every phase's in separate mode, whose
      cache stays through training) reaches USABLE_FRACTION of the device."""
    points = sorted((f for f in fits if _has_figures(f)), key=lambda f: f["sequences"])[-2:]
    if len(points) < 2 or points[0]["sequences"] == points[1]["sequences"]:
        return None
    budget = points[-1]["kv_budget_gb"]  # not a line: it is capped by the free memory at engine start
    used0, used_slope = _line(points, lambda f: f["kv_peak_usage"] * f["kv_cache_gb"])
    by_blocks = (budget - used0) / max(used_slope, 1e-12)
    return int(min(by_blocks, _memory_limit(points, budget)) // n)


def _memory_limit(points: list[dict[str, Any]], budget: float) -> float:
    """Sequences at which min(cache line, budget) + non-KV peak line reaches the usable memory."""
    usable = USABLE_FRACTION * points[-1]["device_total_gb"]
    cache0, cache_slope = _line(points, lambda f: f["kv_cache_gb"])
    peak0, peak_slope = _line(points, _non_kv_peak)
    uncapped = (usable - cache0 - peak0) / max(cache_slope + peak_slope, 1e-12)
    if cache0 + cache_slope * uncapped <= budget:
        return uncapped
    return (usable - budget - peak0) / peak_slope if peak_slope > 0 else float("inf")


def _has_figures(entry: dict[str, Any]) -> bool:
    return bool(entry.get("kv_cache_gb") and entry.get("kv_budget_gb") and entry.get("device_total_gb")
                and entry.get("phase_peaks_gb") and entry.get("kv_peak_usage") is not None)


def _non_kv_peak(entry: dict[str, Any]) -> float:
    phases = entry["phase_peaks_gb"]
    resident = phases if entry.get("kv_during_training") else {k: v for k, v in phases.items() if k == "gen"}
    return max((peak - entry["kv_cache_gb"] for peak in resident.values()), default=0.0)


def _line(points: list[dict[str, Any]], value: Callable[[dict[str, Any]], float]) -> tuple[float, float]:
    """Intercept and slope (per sequence) of `value` through two trials."""
    (x0, y0), (x1, y1) = ((p["sequences"], value(p)) for p in points)
    slope = (y1 - y0) / (x1 - x0)
    return y0 - slope * x0, slope


def search_mode(args, mode: str, log: list[dict[str, Any]]) -> dict[str, Any]:
    deadline = time.monotonic() + (args.time_budget or float("inf"))
    mine = lambda: [e for e in log if e["mode"] == mode]  # noqa: E731

    def predict(size: int) -> int | None:
        return predicted_prompts([e for e in mine() if e["result"] == "fit" and e["num_prompts"] <= size], args.n)

    found = largest_fit(lambda size: run_trial(args, mode, size, log, deadline), args.start_prompts,
                        args.max_prompts, args.granularity, predict)
    found["largest_n_x_batch"] = found["largest_fit"] * args.n if found["largest_fit"] else None
    fits = sorted(e["num_prompts"] for e in mine() if e["result"] == "fit")
    found["first_prediction_prompts"] = predict(fits[1]) if len(fits) > 1 else None
    return found


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    report: dict[str, Any] = {"benchmark": "capacity", "n": args.n, "response_length": args.response_length,
                              "hybridrl_overrides": list(args.hybridrl_override),
                              "gpu_memory_utilization": args.gpu_memory_utilization, "trials": [], "modes": {}}
    for mode in [m for m in args.modes.split(",") if m]:
        report["modes"][mode] = search_mode(args, mode, report["trials"])
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return report


if __name__ == "__main__":
    main()
