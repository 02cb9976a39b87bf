"""Toy workers for the distributed tests: importable top-level classes, so spawned processes can unpickle them."""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

from hybridrl.utils.batch import Batch


class ToyWorker:
    """Records its rank; `train_step` all-reduces, proving the ranks form one SPMD process group."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def getpid(self) -> int:
        return os.getpid()

    def rank_info(self) -> dict:
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TOY_FLAG")
        return {"rank": self.rank, "world_size": self.world_size, "threads": torch.get_num_threads(),
                **{k: os.environ.get(k) for k in keys}}

    def double(self, batch: Batch) -> Batch:
        out = Batch(tensors={"y": batch["x"] * self.scale,
                             "rank": torch.full((len(batch),), self.rank, dtype=torch.long)},
                    non_tensors={"uid": batch["uid"]})
        return out

    def wrong_rows(self, batch: Batch) -> Batch:
        return batch.index(slice(0, 1))

    def train_step(self, batch: Batch) -> float:
        total = batch["x"].sum() * (self.rank + 1)
        dist.all_reduce(total)
        return float(total)

    def metrics(self, batch: Batch) -> dict:
        return {"loss": float(batch["x"].float().mean()), "grad_norm/max": float(self.rank),
                "ratio/min": [float(self.rank), float(self.rank) + 10.0]}

    def fail(self, message: str = "boom") -> None:
        raise ValueError(f"{message} on rank {self.rank}")

    def fail_on_rank1_else_all_reduce(self) -> None:
        if self.rank == 1:
            raise RuntimeError("rank 1 gives up")
        dist.all_reduce(torch.ones(1))  # rank 0 waits here for rank 1 forever

    def say(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def sleep(self, seconds: float) -> None:
        print(f"rank {self.rank} about to sleep {seconds}s", file=sys.stderr, flush=True)
        time.sleep(seconds)

    def write_weights(self, spec) -> object:
        """Rank 0 writes a small set of weights into a shared-memory buffer (the actor's side of a handoff)."""
        from hybridrl.distributed.weight_handoff import write_weights

        return write_weights([("w", torch.ones(1000))], spec) if self.rank == 0 else None


class TritonImportingWorker(ToyWorker):
    """A rank that imports triton (as the trainer's ranks do, through transformers), a nanobind extension."""

    def __init__(self) -> None:
        import triton  # noqa: F401

        super().__init__()


class Rank1FailsAtStartWorker(ToyWorker):
    """Rank 1 writes a line to its stderr (its rank log), then raises in __init__; rank 0 starts fine."""

    def __init__(self) -> None:
        super().__init__()
        if self.rank == 1:
            print("rank 1 is loading its model", file=sys.stderr, flush=True)
            raise RuntimeError("rank 1 could not load its model")


class RoleStartupWorker(ToyWorker):
    """Logs what a role's start-up logs about the role as a whole: its precision and whether it compiles."""

    def __init__(self) -> None:
        from hybridrl.models.compile import compile_decoder_layers
        from hybridrl.workers.precision import Precision, log_precision

        super().__init__()
        log_precision("actor", Precision(torch.float32, torch.float32, torch.float32, "cpu", "the toy's"))
        compile_decoder_layers(torch.nn.Linear(2, 2), torch.device("cpu"), "actor", enabled=True, off_key="toy")


class GradientAveragingRank:
    """Parameters with rank-dependent gradients (one left without a gradient on rank 1, one in float64), then
    `GradientAverager.finish()` in small buckets: every rank must end with the mean over both."""

    def average(self, bucket_bytes: int) -> dict[str, torch.Tensor]:
        from hybridrl.distributed.replicas import GradientAverager

        rank = dist.get_rank()
        params = {name: torch.nn.Parameter(torch.zeros(shape, dtype=dtype)) for name, shape, dtype in (
            ("a", (3, 4), torch.float32), ("b", (5,), torch.float32), ("c", (2, 2), torch.float64),
            ("d", (7,), torch.float32))}
        for index, (name, param) in enumerate(params.items()):
            if not (name == "b" and rank == 1):
                param.grad = torch.full_like(param, float(10 * index + rank + 1))
        frozen = torch.nn.Parameter(torch.zeros(2), requires_grad=False)
        GradientAverager([*params.values(), frozen], bucket_bytes=bucket_bytes).finish()
        assert frozen.grad is None
        return {name: param.grad for name, param in params.items()}


class OverlappedAveragingRank:
    """Two micro-batches on a small MLP with one parameter unused by the last: the first backward runs plain,
    the last inside `GradientAverager.overlapping()` (a bucket per parameter, so buckets launch from the hooks
    while backward runs). Returns this rank's own gradients and the averaged ones."""

    def average(self, bucket_bytes: int) -> dict[str, dict[str, torch.Tensor]]:
        from hybridrl.distributed.replicas import GradientAverager

        torch.manual_seed(0)  # the same initial weights on every rank
        # registration order: buckets run in reverse, so "side" (first here, as an LM's embeddings) comes last
        model = torch.nn.ModuleDict({"side": torch.nn.Linear(4, 3), "a": torch.nn.Linear(4, 8), "b": torch.nn.Linear(8, 3)})
        averager = GradientAverager(model.parameters(), bucket_bytes=bucket_bytes)
        gen = torch.Generator().manual_seed(dist.get_rank() + 1)  # each rank its own data
        first, last = torch.randn(5, 4, generator=gen), torch.randn(5, 4, generator=gen)
        (model["b"](model["a"](first)).sum() + model["side"](first).sum()).backward()
        with averager.overlapping():
            model["b"](torch.tanh(model["a"](last))).pow(2).sum().backward()  # "side" unused here
        own = {name: p.grad.clone() for name, p in model.named_parameters()}
        launched_in_backward = averager.launched
        averager.finish()
        return {"own": own, "mean": {name: p.grad for name, p in model.named_parameters()},
                "launched_in_backward": launched_in_backward}
