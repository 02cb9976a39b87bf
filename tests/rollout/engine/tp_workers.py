"""A rank of a tensor-parallel engine replica for the TP tests (importable, so spawned ranks unpickle it)."""

from __future__ import annotations

import torch.distributed as dist

from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.engine.parallel import TensorParallel
from tests.rollout.engine.helpers import PROMPTS, make_engine, make_model


class TPEngineRank:
    """Builds the same tiny model on every rank and this rank's slice of it in an engine."""

    def __init__(self, arch: str, seed: int = 1, **overrides) -> None:
        tp = TensorParallel(dist.get_rank(), dist.get_world_size(), dist.group.WORLD)
        self.arch, self.overrides = arch, overrides
        self.engine = make_engine(make_model(arch, seed=seed, **overrides), tp=tp)

    def generate(self, params: SamplingParams) -> tuple[list, list]:
        out = self.engine.generate(PROMPTS, params)
        return out.token_ids, out.log_probs

    def update_weights(self, seed: int) -> None:
        self.engine.update_weights(make_model(self.arch, seed=seed, **self.overrides).named_parameters())

    def num_local_params(self) -> int:
        return sum(p.numel() for p in self.engine.model.parameters())
