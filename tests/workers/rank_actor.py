"""An actor on one gloo rank for the multi-rank worker tests (importable, so spawned ranks can unpickle it)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from hybridrl.utils.batch import Batch
from tests.workers.helpers import build_actor


class ActorRank:
    def __init__(self, model_dir: str, extra: list[str]) -> None:
        torch.set_num_threads(1)
        self.actor = build_actor(model_dir, extra, world_size=dist.get_world_size())

    def compute_log_prob(self, batch: Batch) -> Batch:
        """The log-probs, and how many micro-batches this rank ran (the same on every rank, or FSDP hangs)."""
        out = self.actor.compute_log_prob(batch)
        out["num_parts"] = torch.full((len(batch),), len(self.actor.log_prob_plan.split(batch, True).parts))
        out["local_min_parts"] = torch.full((len(batch),), len(self.actor.log_prob_plan.split(batch).parts))
        return out

    def update_actor(self, batch: Batch) -> dict[str, float]:
        return self.actor.update_actor(batch)

    def full_grads(self) -> list[torch.Tensor]:
        return [p.grad.full_tensor() for p in self.actor.model.parameters() if p.grad is not None]
