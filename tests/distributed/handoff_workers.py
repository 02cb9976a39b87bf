"""A `ColocatedWorker` the weight-handoff tests can change and look into (top-level: spawned ranks import it)."""

from __future__ import annotations

import torch

from hybridrl.workers.colocated import ColocatedWorker


class InspectableWorker(ColocatedWorker):
    @torch.no_grad()
    def scale_actor(self, factor: float) -> None:
        """Change every actor weight (each rank its shard), as an update would, off bf16's grid."""
        for param in self.actor.model.parameters():
            param.mul_(factor)

    def rollout_weights(self) -> dict[str, torch.Tensor]:
        """What the rollout generates with (the hf backend's replica), as CPU copies."""
        return {name: tensor.detach().clone() for name, tensor in self.rollout.replica.state_dict().items()}
