"""Actor → rollout weight handoff between processes on one node: shared memory vs pickling through pipes.

Two one-rank groups on the local launcher (real spawned processes, as a split placement runs): an
"actor" holding Qwen2.5-0.5B-shaped fp32 weights (what FSDP's gather yields, one tensor at a time, on
the actor's rank 0) and a "rollout" holding bf16 parameters of the same shapes. Each mode runs the
trainer's code path (`WeightHandoff.gather` then `.load`) for a few steps:

- `pickle_fp32`: the path before the shared-memory handoff (master dtype, pickled actor → controller →
  rollout);
- `pickle_bf16`: the same pipes, cast to the rollout's dtype first (Ray's path now);
- `shared_memory`: the actor writes one bf16 buffer in /dev/shm; the rollout maps it and copies.

Prints one JSON object: per mode the seconds of each step (gather, load, total), GB moved, and the
speed-up over `pickle_fp32`. Usage: `python benchmarks/weight_handoff_bench.py [--quick] [--steps N]
[--modes ...] [--out FILE]`. Never asserts times (DESIGN.md §10).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.common import model_shapes  # noqa: E402
from hybridrl.distributed import LocalWorkerGroup  # noqa: E402
from hybridrl.distributed.weight_handoff import cast_to_cpu, write_weights  # noqa: E402
from hybridrl.distributed.weight_sync import WeightHandoff  # noqa: E402

MODES = {"pickle_fp32": ("pickle", None), "pickle_bf16": ("pickle", torch.bfloat16),
         "shared_memory": ("shared_memory", torch.bfloat16)}


class BenchActor:
    """The actor's rank 0 with the full fp32 weights; the two methods `ColocatedWorker` offers a handoff."""

    def __init__(self, quick: bool) -> None:
        torch.manual_seed(0)
        self.weights = {name: torch.randn(shape) for name, shape in model_shapes(quick).items()}

    def actor_weights(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        return {name: cast_to_cpu(tensor, dtype, copy=True) for name, tensor in self.weights.items()}

    def write_actor_weights(self, spec):
        return write_weights(self.weights.items(), spec)

    def step(self) -> None:
        for tensor in self.weights.values():
            tensor.add_(1e-3)  # an "update", so every handoff moves new values


class BenchRollout:
    """A rollout rank with bf16 parameters, loading a handoff the way the engine does (copy_ per tensor)."""

    def __init__(self, quick: bool) -> None:
        self.params = {name: torch.zeros(shape, dtype=torch.bfloat16) for name, shape in model_shapes(quick).items()}

    @torch.no_grad()
    def load_rollout_weights(self, payload) -> None:
        for name, tensor in payload.open():
            self.params[name].copy_(tensor)

    def checksum(self) -> float:
        return float(sum(p.float().sum() for p in self.params.values()))


def run_mode(mode: str, actor: LocalWorkerGroup, rollout: LocalWorkerGroup, steps: int) -> dict:
    handoff = WeightHandoff(*MODES[mode])
    records = []
    try:
        for _ in range(steps):
            actor.call_all("step")
            start = time.perf_counter()
            payload = handoff.gather(actor)
            gathered = time.perf_counter()
            handoff.load(rollout, payload)
            done = time.perf_counter()
            records.append({"gather_s": gathered - start, "load_s": done - gathered, "total_s": done - start})
        metrics = handoff.metrics()
    finally:
        handoff.close()
    want = sum(float(t.to(torch.bfloat16).float().sum()) for t in actor.call_rank0("actor_weights").values())
    return {"steps": records, "steady_total_s": min(r["total_s"] for r in records[1:] or records),
            "gb": metrics["perf/update_weights_gb"], "shared_memory": metrics["perf/update_weights_shared_memory"],
            "rollout_checksum_matches": abs(rollout.call_rank0("checksum") - want) <= 1e-3 * max(1.0, abs(want))}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="toy Qwen2 shape (CPU smoke test)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    actor = LocalWorkerGroup(BenchActor, {"quick": args.quick}, world_size=1, role="bench_actor")
    rollout = LocalWorkerGroup(BenchRollout, {"quick": args.quick}, world_size=1, role="bench_rollout")
    try:
        results = {mode: run_mode(mode, actor, rollout, args.steps) for mode in args.modes}
    finally:
        actor.shutdown()
        rollout.shutdown()
    if "pickle_fp32" in results:
        base = results["pickle_fp32"]["steady_total_s"]
        for record in results.values():
            record["speedup_vs_pickle_fp32"] = base / record["steady_total_s"]
    shapes = model_shapes(args.quick)
    report = {"benchmark": "weight_handoff", "model": "toy qwen2" if args.quick else "Qwen2.5-0.5B shape",
              "num_params": sum(torch.Size(s).numel() for s in shapes.values()), "num_tensors": len(shapes),
              "device": "cpu", "modes": results}
    text = __import__("json").dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return report


if __name__ == "__main__":
    main()
