"""Elastic rollout on a split placement: actor on device 0, rollout on device 1; after step `--grow-after`
the trainer gets a real SIGUSR1 and lends the actor's device to the rollout. Prints one JSON object with
`timing_s/gen` and step time per step, and their means before and after the change.

    python benchmarks/elastic_bench.py --out elastic.json          # 2 GPUs (nvidia-h200-x2)
    python benchmarks/elastic_bench.py --quick                     # toy shapes, 2 CPU processes

The workload and verl overrides are those of rl_step_bench.py (GRPO + KL loss, 64 prompts x n=8 x 256
forced tokens on a Qwen2.5-0.5B-shaped model), placed with `actor_rollout_ref.actor.device_ids=[0]
actor_rollout_ref.rollout.device_ids=[1] trainer.n_gpus_per_node=2`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks import rl_step_bench, rl_step_hybridrl  # noqa: E402
from benchmarks.common import emit, environment  # noqa: E402

KEYS = ("timing_s/gen", "timing_s/step", "timing_s/update_weights", "timing_s/update_actor",
        "timing_s/old_log_prob", "timing_s/ref", "perf/rollout_num_devices", "perf/throughput")


def parse_args(argv: list[str] | None):
    """Its own two flags; everything else is rl_step_bench's (one hybrid run of `--elastic-steps` steps)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--grow-after", type=int, default=2, help="send SIGUSR1 after this step")
    parser.add_argument("--elastic-steps", type=int, default=5, help="RL steps in all")
    own, rest = parser.parse_known_args(argv)
    args = rl_step_bench.parse_args(rest + ["--only", "hybrid", "--steps", str(own.elastic_steps)])
    args.grow_after = own.grow_after
    placement = ["trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.device_ids=[0]",
                 "actor_rollout_ref.rollout.device_ids=[1]", "actor_rollout_ref.rollout.free_cache_engine=true"]
    args.hybridrl_override = placement + args.hybridrl_override
    return args


def grow_after(trainer, step: int) -> list[dict[str, float]]:
    """Each step's metrics dict (the trainer adds perf/rollout_num_devices to it after `run_step`); after
    `step` send this process SIGUSR1 (the trainer's real handler)."""
    steps: list[dict[str, float]] = []
    run_step = trainer.run_step

    def recorded(prompts):
        metrics = run_step(prompts)
        steps.append(metrics)
        if len(steps) == step:
            os.kill(os.getpid(), signal.SIGUSR1)
        return metrics

    trainer.run_step = recorded
    return steps


def mean(rows: list[dict[str, float]], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return sum(values) / len(values) if values else None


def summarize(steps: list[dict[str, float]], grow_at: int, warmup: int) -> dict[str, Any]:
    steps = [{k: float(s[k]) for k in KEYS if k in s} for s in steps]
    before, after = steps[warmup:grow_at], steps[grow_at + 1:]  # the step right after the change re-warms
    return {"per_step": steps, "grow_after_step": grow_at,
            "before": {k: mean(before, k) for k in KEYS}, "after": {k: mean(after, k) for k in KEYS},
            "steps_before": [warmup + 1 + i for i in range(len(before))],
            "steps_after": [grow_at + 2 + i for i in range(len(after))]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from hybridrl.config import load_config
    from hybridrl.trainer.ppo_trainer import PPOTrainer

    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="elastic_bench_", dir=args.workdir) as tmp:
        paths, _, config, lengths = rl_step_bench.prepare(args, Path(tmp))
        overrides = rl_step_hybridrl.overrides(args, paths, "hybrid")
        with contextlib.redirect_stdout(sys.stderr):
            trainer = PPOTrainer(load_config(overrides))
            steps = grow_after(trainer, args.grow_after)
            trainer.fit()
    report = {"benchmark": "elastic_rollout", "environment": environment(args.device),
              "workload": rl_step_bench.workload(args, config, lengths),
              "overrides": [o for o in overrides if "device_ids" in o or "n_gpus" in o],
              **summarize(steps, args.grow_after, args.warmup_steps)}
    emit(report, args.out)
    return report


if __name__ == "__main__":
    main()
