"""Data-parallel scaling from `rl_step_bench.py` reports: each run's steady throughput against the one-device run's.

    python benchmarks/scaling_summary.py --base results/g1.json --gpus 2 \\
        g2_replicas=results/g2_replicas.json g2_fsdp=results/g2_fsdp.json --out results/scaling.json

Throughput is the median steady step's (`tokens_per_s_median`: a one-off slow step moves a short run's mean).
Runs must be the same workload (tokens per step, prompts, n, response length): a ratio between different
workloads would mean nothing, so a mismatch is an error naming both. Prints one JSON object: per run its
speedup over the base, the scaling efficiency (speedup / gpus), whether it reaches `--target`, and each
phase's seconds beside the base's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import emit  # noqa: E402

WORKLOAD_KEYS = ("num_prompts", "n", "response_length", "tokens_per_step")


def load_run(path: str) -> dict[str, Any]:
    report = json.loads(Path(path).read_text())
    try:
        run = report["hybridrl"]["hybrid"]
    except KeyError:
        raise ValueError(f"{path} is not an rl_step_bench.py report with a hybrid run (keys: {sorted(report)}); "
                         "run rl_step_bench.py with --only hybrid") from None
    return {"path": path, "workload": {k: report["workload"].get(k) for k in WORKLOAD_KEYS},
            "tokens_per_s_median": run["tokens_per_s_median"], "step_s_median": run["step_s_median"],
            "steady_steps": len(run["steady_steps"]),
            "phases_s": {k.removeprefix("timing_s/"): v for k, v in run.items() if k.startswith("timing_s/")}}


def compare(base: dict[str, Any], run: dict[str, Any], gpus: int, target: float) -> dict[str, Any]:
    if run["workload"] != base["workload"]:
        raise ValueError(f"{run['path']} ran {run['workload']} but the base {base['path']} ran {base['workload']}: "
                         "compare runs of the same workload (same --num-prompts, --n, --response-length)")
    speedup = run["tokens_per_s_median"] / base["tokens_per_s_median"]
    phases = {name: {"run": seconds, "base": base["phases_s"].get(name)} for name, seconds in run["phases_s"].items()}
    return {**{k: run[k] for k in ("path", "tokens_per_s_median", "step_s_median", "steady_steps")},
            "speedup": speedup, "scaling_efficiency": speedup / gpus, "reaches_target": speedup >= target,
            "phases_s": phases}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the one-device run's report")
    parser.add_argument("--gpus", type=int, default=2, help="devices of the compared runs")
    parser.add_argument("--target", type=float, default=1.8, help="speedup the runs should reach")
    parser.add_argument("--out", default=None)
    parser.add_argument("runs", nargs="+", help="NAME=REPORT for each multi-device run")
    args = parser.parse_args(argv)
    bad = [r for r in args.runs if "=" not in r]
    if bad:
        parser.error(f"runs are NAME=REPORT pairs, got {bad}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    base = load_run(args.base)
    runs = dict(r.split("=", 1) for r in args.runs)
    summary = {"base": {k: base[k] for k in ("path", "tokens_per_s_median", "step_s_median", "steady_steps")},
               "gpus": args.gpus, "target_speedup": args.target, "workload": base["workload"],
               "runs": {name: compare(base, load_run(path), args.gpus, args.target) for name, path in runs.items()}}
    emit(summary, args.out)
    return summary


if __name__ == "__main__":
    main()
