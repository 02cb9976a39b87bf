"""Construct the role workers a run needs (actor, rollout, reference, critic, reward) on one process."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hybridrl.logging.log import get_logger
from hybridrl.workers.actor import ActorWorker
from hybridrl.workers.critic import CriticWorker
from hybridrl.workers.reference import ReferenceWorker
from hybridrl.workers.reward import RewardWorker
from hybridrl.workers.rollout import RolloutWorker
from hybridrl.workers.sizes import BatchSizes


log = get_logger("hybridrl.trainer")


@dataclass
class Roles:
    actor: ActorWorker
    rollout: RolloutWorker
    reward: RewardWorker
    reference: ReferenceWorker | None = None
    critic: CriticWorker | None = None


def build_critic(cfg, sizes: BatchSizes, device: torch.device, total_steps: int):
    """A trainable critic, or a frozen remote value model (`critic.type=vllm_api`, path = its URL)."""
    from hybridrl.workers.reward import is_remote

    if is_remote(cfg.critic.model.path, cfg.critic.type):
        from hybridrl.workers.remote_critic import RemoteCriticWorker

        critic = RemoteCriticWorker(cfg.critic.model.path)
        log.info(critic.describe())
        return critic
    return CriticWorker(cfg, sizes, device, total_steps)


def build_roles(cfg, needs, tokenizer, device: torch.device, total_steps: int, world_size: int = 1) -> Roles:
    sizes = BatchSizes.from_config(cfg, world_size)
    actor = ActorWorker(cfg, sizes, device, total_steps)
    rollout = RolloutWorker(cfg, actor.model, tokenizer, device.type)
    reference = ReferenceWorker(cfg, sizes.ref_log_prob_micro, device) if needs.reference else None
    critic = build_critic(cfg, sizes, device, total_steps) if needs.critic else None
    return Roles(actor=actor, rollout=rollout, reward=RewardWorker(cfg, tokenizer), reference=reference,
                 critic=critic)
