"""Largest n x batch each memory mode fits on one GPU: one RL step of rl_step_bench's workload per trial.

    python benchmarks/capacity_bench.py --response-length 1024 --out capacity.json   # H200
    python benchmarks/capacity_bench.py --quick --max-prompts 16                       # CPU smoke run

For each mode (`hybrid`: KV cache only during generation; `separate`: KV cache reserved through training)
the number of prompts (x n responses each) doubles from --start-prompts until a step runs out of device
memory, then bisects between the last size that fit and the first that did not, down to --granularity
prompts. Every trial is a fresh `rl_step_bench.py --steps 1` subprocess, so a failed trial leaves no
memory behind. A trial that fails for another reason (or times out) stops that mode's search and is
reported as such, never counted as a fit or an out-of-memory.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
GSM8K_1024 = HERE / "data" / "gsm8k_train_1024.jsonl"
OOM_MARKERS = ("out of memory", "outofmemoryerror")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="hybrid,separate")
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--response-length", type=int, default=1024)
    parser.add_argument("--start-prompts", type=int, default=64)
    parser.add_argument("--max-prompts", type=int, default=1024, help="at most the rows of --gsm8k")
    parser.add_argument("--granularity", type=int, default=16, help="bisect down to this many prompts")
    parser.add_argument("--micro-batch", type=int, default=64)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--trial-timeout", type=int, default=900, help="seconds per trial")
    parser.add_argument("--gsm8k", default=str(GSM8K_1024))
    parser.add_argument("--quick", action="store_true", help="toy shapes on CPU (smoke test of the search)")
    parser.add_argument("--hybridrl-override", action="append", default=[],
                        help="extra verl override for every trial (repeatable), e.g. ...use_torch_compile=false")
    parser.add_argument("--out", default=None)
    return parser.parse_args(argv)


def largest_fit(fits: Callable[[int], bool | None], start: int, limit: int, granularity: int) -> dict[str, Any]:
    """Double from `start` while `fits`, then bisect to `granularity`. `fits` returns True, False (out of
    memory) or None (failed otherwise: the search stops). Returns the largest size that fit (or None),
    the smallest that did not, and whether the search was cut short."""
    good, bad, size = None, None, start
    while size <= limit:
        verdict = fits(size)
        if verdict is None:
            return {"largest_fit": good, "smallest_oom": bad, "stopped_by_error_at": size}
        if not verdict:
            bad = size
            break
        good, size = size, size * 2
    while good is not None and bad is not None and bad - good > granularity:
        middle = (good + bad) // 2 // granularity * granularity
        if middle in (good, bad):
            break
        verdict = fits(middle)
        if verdict is None:
            return {"largest_fit": good, "smallest_oom": bad, "stopped_by_error_at": middle}
        good, bad = (middle, bad) if verdict else (good, middle)
    return {"largest_fit": good, "smallest_oom": bad, "stopped_by_error_at": None}


def run_trial(args, mode: str, num_prompts: int, log: list[dict[str, Any]]) -> bool | None:
    """One RL step at `num_prompts` x n in a subprocess: True (fit), False (out of memory), None (other)."""
    with tempfile.TemporaryDirectory(prefix="capacity_") as tmp:
        out = Path(tmp) / "step.json"
        cmd = [sys.executable, str(HERE / "rl_step_bench.py"), "--only", mode, "--num-prompts", str(num_prompts),
               "--n", str(args.n), "--response-length", str(args.response_length), "--steps", "1",
               "--warmup-steps", "0", "--micro-batch", str(args.micro_batch), "--gsm8k", args.gsm8k,
               "--gpu-memory-utilization", str(args.gpu_memory_utilization), "--out", str(out)]
        cmd += ["--quick"] if args.quick else []
        cmd += [arg for override in args.hybridrl_override for arg in ("--hybridrl-override", override)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.trial_timeout)
        except subprocess.TimeoutExpired:
            log.append({"mode": mode, "num_prompts": num_prompts, "result": "timeout"})
            return None
        result = json.loads(out.read_text())["hybridrl"].get(mode, {}) if out.exists() else {}
    text = (proc.stderr + json.dumps(result)).lower()
    verdict = True if proc.returncode == 0 and "step_s" in result else (
        False if any(marker in text for marker in OOM_MARKERS) else None)
    log.append({"mode": mode, "num_prompts": num_prompts, "sequences": num_prompts * args.n,
                "result": {True: "fit", False: "out of memory", None: "error"}[verdict],
                "step_s": result.get("step_s"), "peak_memory_gb": (result.get("peak_memory_gb") or {}).get(
                    "perf/max_memory_allocated_gb"),
                "error_tail": None if verdict is not None else proc.stderr[-1500:]})
    return verdict


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    report: dict[str, Any] = {"benchmark": "capacity", "n": args.n, "response_length": args.response_length,
                              "hybridrl_overrides": list(args.hybridrl_override),
                              "gpu_memory_utilization": args.gpu_memory_utilization, "trials": [], "modes": {}}
    for mode in [m for m in args.modes.split(",") if m]:
        found = largest_fit(lambda size: run_trial(args, mode, size, report["trials"]), args.start_prompts,
                            args.max_prompts, args.granularity)
        found["largest_n_x_batch"] = found["largest_fit"] * args.n if found["largest_fit"] else None
        report["modes"][mode] = found
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return report


if __name__ == "__main__":
    main()
