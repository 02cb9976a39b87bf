"""What the local launcher's controller-to-rank transport costs per call, at the RL step's batch sizes.

    python benchmarks/dispatch_bench.py [--ranks 2] [--rows 512] [--quick] [--out results/dispatch.json]

An echo worker group (`--ranks` processes, no model) answers the three call shapes of a step, so the time is
all transport: sharding, pickling, the pipes, unpickling and gathering.
- `gen`: the prompts go out (rows x prompt columns), generated sequences come back (the rl_step batch);
- `ref`: the batch goes out, one fp32 value per response token comes back;
- `update`: the batch goes out, a metrics dict comes back.
Per call: the median and min wall ms over `--iters` calls after one warm-up, and the MB each way. The
controller and the ranks take their shares of the cores for torch's threads, as in a training run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import torch  # noqa: E402

from benchmarks.common import emit, environment, fill_defaults  # noqa: E402
from hybridrl.distributed.cpu_threads import controller_cpu_threads  # noqa: E402
from hybridrl.distributed.local_launcher import LocalWorkerGroup  # noqa: E402
from hybridrl.utils.batch import Batch  # noqa: E402


def step_batch(rows: int, prompt: int, response: int) -> Batch:
    """The keys and dtypes a PPO step's batch carries to the actor (verl's names), at `rows` x (prompt + response)."""
    width = prompt + response
    floats = ("rollout_log_probs", "old_log_probs", "ref_log_prob", "advantages", "token_level_scores",
              "token_level_rewards")
    return Batch({"input_ids": torch.randint(0, 150_000, (rows, width)),
                  "attention_mask": torch.ones(rows, width, dtype=torch.long),
                  "position_ids": torch.arange(width).repeat(rows, 1),
                  "responses": torch.randint(0, 150_000, (rows, response)),
                  "response_mask": torch.ones(rows, response, dtype=torch.long),
                  **{key: torch.randn(rows, response) for key in floats}}, meta={"temperature": 1.0})


class EchoWorker:
    """A rank with no model: replies with what the real phase would send back, at the same sizes."""

    def __init__(self, prompt: int, response: int) -> None:
        self.prompt, self.response = prompt, response

    def generate_sequences(self, prompts: Batch) -> Batch:
        return step_batch(len(prompts), self.prompt, self.response)

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        return Batch({"ref_log_prob": torch.zeros(len(batch), self.response)})

    def update_actor(self, batch: Batch) -> dict[str, float]:
        return {"actor/pg_loss": 0.0, "actor/grad_norm": 1.0}


def _megabytes(batch: Batch) -> float:
    return round(sum(t.numel() * t.element_size() for t in batch.tensors.values()) / 1e6, 2)


def time_calls(call, iters: int) -> dict[str, float]:
    call()  # warm-up: first-touch allocations on both sides
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": round(statistics.median(times), 2), "min_ms": round(min(times), 2)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    batch = step_batch(args.rows, args.prompt, args.response)
    prompts = Batch({"input_ids": batch["input_ids"][:, :args.prompt].clone(),
                     "attention_mask": batch["attention_mask"][:, :args.prompt].clone()})
    log_probs = Batch({"ref_log_prob": torch.zeros(args.rows, args.response)})
    with LocalWorkerGroup(EchoWorker, {"prompt": args.prompt, "response": args.response}, world_size=args.ranks,
                          role="dispatch") as group, controller_cpu_threads(args.ranks + 1):  # as the trainer does
        calls = {
            "gen": (lambda: group.call_sharded("generate_sequences", prompts), prompts, batch),
            "ref": (lambda: group.call_sharded("compute_ref_log_prob", batch), batch, log_probs),
            "update": (lambda: group.call_sharded_metrics("update_actor", batch), batch, Batch()),
        }
        results = {name: {**time_calls(call, args.iters), "mb_out": _megabytes(out), "mb_back": _megabytes(back)}
                   for name, (call, out, back) in calls.items()}
        threads = torch.get_num_threads()
    return {"benchmark": "dispatch_bench", "ranks": args.ranks, "controller_threads": threads, "rows": args.rows,
            "prompt": args.prompt, "response": args.response, "iters": args.iters, "calls": results,
            "environment": environment("cpu")}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small batch, few calls (CPU test)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rows", type=int, default=None, help="default 512 (quick: 16)")
    parser.add_argument("--prompt", type=int, default=None, help="prompt columns, default 159 (quick: 8)")
    parser.add_argument("--response", type=int, default=None, help="response columns, default 256 (quick: 8)")
    parser.add_argument("--iters", type=int, default=None, help="timed calls per shape, default 10 (quick: 2)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    fill_defaults(args, quick=dict(rows=16, prompt=8, response=8, iters=2),
                  full=dict(rows=512, prompt=159, response=256, iters=10))
    result = run(args)
    emit(result, args.out)
    return result


if __name__ == "__main__":
    main()
