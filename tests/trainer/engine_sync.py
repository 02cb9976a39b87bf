"""Shared check: after training, the rollout engine holds exactly the actor's weights."""

from __future__ import annotations

import torch

from hybridrl.rollout.engine.llm_engine import LLMEngine


def assert_engine_matches_actor(trainer) -> None:
    engine = trainer.roles.rollout.backend
    fresh = LLMEngine(trainer.roles.actor.model, dtype=engine.runner.dtype, device=engine.device, num_kv_blocks=4)
    synced = dict(engine.model.named_parameters())
    for name, param in fresh.model.named_parameters():
        assert torch.equal(synced[name], param), f"engine weight {name} differs from the actor's"
