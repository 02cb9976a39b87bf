"""Shared check: after training, the rollout engine holds exactly the actor's weights."""

from __future__ import annotations

import torch

from hybridrl.rollout.engine.llm_engine import LLMEngine
from tests.trainer.helpers import local_worker


def assert_engine_matches_actor(trainer) -> None:
    worker = local_worker(trainer)
    engine = worker.rollout.backend
    fresh = LLMEngine(worker.actor.model, dtype=engine.runner.dtype, device=engine.device, num_kv_blocks=4)
    synced = dict(engine.model.named_parameters())
    for name, param in fresh.model.named_parameters():
        assert torch.equal(synced[name], param), f"engine weight {name} differs from the actor's"
