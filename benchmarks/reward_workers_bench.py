"""Reward scoring in the trainer's process (a thread) against `reward_model.num_workers` processes (CPU only).

    python benchmarks/reward_workers_bench.py --out results/reward_workers_cpu_2core.json
    python benchmarks/reward_workers_bench.py --quick          # toy sizes (test smoke run)

The reward function stands in for a slow verifier (math checking, code tests): pure Python that holds
the GIL for `--row-ms` ms per row. For `--rows` rows it measures, with the scoring submitted the way the
trainer submits `launch_reward_fn_async` (a thread, through `utils/threads.submit_responsive`):
- `score_s`: wall time of one batch, scored on the thread (num_workers=1) or through a ScoringPool of
  `--workers` processes (started beforehand; `pool_start_s` is the first batch's extra time);
- `main_thread_ops_per_s`: how many small torch ops the main thread runs per second meanwhile (the
  controller launching kernels or talking to its ranks), against `alone`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import emit, environment  # noqa: E402
from hybridrl.rewards.manager import score_batch  # noqa: E402
from hybridrl.rewards.pool import ScoreFnSpec, ScoringPool  # noqa: E402
from hybridrl.utils.threads import submit_responsive  # noqa: E402

SLOW_REWARD = '''
import time


def compute_score(data_source, solution_str, ground_truth, extra_info=None, row_ms=2.0):
    end = time.perf_counter() + row_ms / 1000
    total = 0
    while time.perf_counter() < end:  # pure Python: holds the GIL, as a verifier does
        total += sum(ord(c) for c in solution_str[:64])
    return float(solution_str.strip() == ground_truth)
'''


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy sizes")
    parser.add_argument("--rows", type=int, default=None, help="rows per batch, default 512 (quick: 16)")
    parser.add_argument("--row-ms", type=float, default=None, help="reward time per row, default 2 (quick: 0.5)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.rows = args.rows or (16 if args.quick else 512)
    args.row_ms = args.row_ms or (0.5 if args.quick else 2.0)
    return args


def main_thread_rate(seconds: float) -> float:
    """Small torch ops per second on the calling thread for `seconds`."""
    x, n = torch.zeros(64), 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        x.add_(1)
        n += 1
    return n / seconds


def beside(score: Callable[[], Any], pool: ThreadPoolExecutor) -> dict[str, float]:
    """Submit `score` as the trainer does and measure the main thread until it finishes."""
    start = time.perf_counter()
    future = submit_responsive(pool, score)
    x, n = torch.zeros(64), 0
    while not future.done():
        x.add_(1)
        n += 1
    elapsed = time.perf_counter() - start
    future.result()
    return {"score_s": elapsed, "main_thread_ops_per_s": n / elapsed}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "slow_reward.py"
        path.write_text(SLOW_REWARD)
        spec = ScoreFnSpec(str(path), "compute_score", {"row_ms": args.row_ms})
        rows = (["42"] * args.rows, ["custom"] * args.rows, ["42"] * args.rows, [None] * args.rows)
        fn = spec.load()
        scoring_pool = ScoringPool(spec, args.workers)
        results: dict[str, Any] = {"alone": {"main_thread_ops_per_s": main_thread_rate(0.5)}}
        with ThreadPoolExecutor(max_workers=1) as threads:
            results["in_process_thread"] = beside(lambda: score_batch(*rows, fn), threads)
            start = time.perf_counter()
            scoring_pool.score(*rows)
            results["pool_start_s"] = time.perf_counter() - start - args.rows * args.row_ms / 1000 / args.workers
            results[f"pool_{args.workers}_workers"] = beside(lambda: scoring_pool.score(*rows), threads)
        scoring_pool.close()
    report = {"benchmark": "reward_workers", "environment": environment("cpu"),
              "shapes": {"rows": args.rows, "row_ms": args.row_ms, "workers": args.workers}, **results}
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
