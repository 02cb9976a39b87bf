"""A rank of tensor-parallel engine replicas for the TP tests (importable, so spawned ranks unpickle it)."""

from __future__ import annotations

import torch.distributed as dist

from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.engine.parallel import TensorParallel
from tests.rollout.engine.helpers import PROMPTS, make_engine, make_model


class TPEngineRank:
    """This rank's slice of each tiny model in `models` ({name: (arch, config overrides)}), one engine each."""

    def __init__(self, models: dict[str, tuple[str, dict]], seed: int = 1) -> None:
        tp = self.tp = TensorParallel(dist.get_rank(), dist.get_world_size(), dist.group.WORLD)
        self.models = models
        self.engines = {name: make_engine(make_model(arch, seed=seed, **overrides), tp=tp)
                        for name, (arch, overrides) in models.items()}

    def generate(self, name: str, params: SamplingParams) -> tuple[list, list]:
        out = self.engines[name].generate(PROMPTS, params)
        return out.token_ids, out.log_probs

    def update_weights(self, name: str, seed: int) -> None:
        arch, overrides = self.models[name]
        self.engines[name].update_weights(make_model(arch, seed=seed, **overrides).named_parameters())

    def num_local_params(self, name: str) -> int:
        return sum(p.numel() for p in self.engines[name].model.parameters())

    def agree_min(self, values: list[int]) -> int:
        return self.tp.agree_min(values[dist.get_rank()])
