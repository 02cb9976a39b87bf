"""Construct the role workers a run needs (actor, rollout, reference, critic, reward).

One process (`RunPlan.launcher == "in_process"`): in-process workers. Otherwise group-backed adapters over
worker groups (by default one group of colocated ranks, `group_roles`); reward scoring (and a remote critic)
stays on the controller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hybridrl.config import HybridRLConfig
from hybridrl.config.run_plan import RunPlan
from hybridrl.logging.log import get_logger
from hybridrl.trainer.weight_sync import HANDOFF_BY_LAUNCHER, WeightHandoff
from hybridrl.workers.actor import ActorWorker
from hybridrl.workers.critic import CriticWorker
from hybridrl.workers.reference import ReferenceWorker, build_reference
from hybridrl.workers.reward import RewardWorker
from hybridrl.workers.rollout import RolloutWorker, rollout_weights_dtype
from hybridrl.workers.sizes import BatchSizes


log = get_logger("hybridrl.trainer")


@dataclass
class Roles:
    actor: ActorWorker
    rollout: RolloutWorker
    reward: RewardWorker
    reference: ReferenceWorker | None = None
    critic: CriticWorker | None = None
    group: Any = None  # group_roles.RankGroups when the roles run on worker ranks
    handoff: Any = None  # weight_sync.WeightHandoff: the actor's weights to rollout ranks in other processes

    def shutdown(self) -> None:
        """Stop the worker ranks (no-op for in-process roles) and remove the weight buffer; safe to call twice
        or after a failure."""
        if self.group is not None:
            self.group.shutdown()
        if self.handoff is not None:
            self.handoff.close()
        self.reward.close()


def build_critic(cfg: HybridRLConfig, plan: RunPlan, sizes: BatchSizes | None, device: torch.device,
                 total_steps: int):
    """A trainable critic, or a frozen remote value model (`critic.type=vllm_api`, path = its URL)."""
    if plan.remote_critic:
        from hybridrl.workers.remote_critic import RemoteCriticWorker

        critic = RemoteCriticWorker(cfg.critic.model.path)
        log.info(critic.describe())
        return critic
    assert sizes is not None, "a trainable critic in this process needs its batch sizes"
    return CriticWorker(cfg, sizes, device, total_steps)


def _rollout_source(cfg: HybridRLConfig, plan: RunPlan, actor):
    """What the rollout backend is built from: the actor's module, except that our engine cannot read a
    PEFT-wrapped module and is built from the base model directory (then synced with merged weights)."""
    if actor.lora and plan.rollout_backend == "hybrid":
        return cfg.actor_rollout_ref.model.path
    return actor.model


def build_roles(cfg: HybridRLConfig, plan: RunPlan, tokenizer, total_steps: int) -> Roles:
    if plan.on_ranks:
        return build_group_roles(cfg, plan, tokenizer, total_steps)
    device, needs = torch.device(plan.device), plan.needs
    sizes = BatchSizes.from_config(cfg, plan.world_size)
    actor = ActorWorker(cfg, sizes, device, total_steps)
    rollout = RolloutWorker(cfg, _rollout_source(cfg, plan, actor), tokenizer, device.type,
                            model_context=actor.offloader.for_compute)
    if actor.lora:  # the engine starts from the base weights on disk: give it base + adapter now
        rollout.sync_weights(actor.named_weights())
    reference = build_reference(cfg, actor, sizes.ref_log_prob_micro, device) if needs.reference else None
    critic = build_critic(cfg, plan, sizes, device, total_steps) if needs.critic else None
    # for rollout replicas borrowed later (elastic): local processes, so shared memory reaches them
    handoff = WeightHandoff("shared_memory", rollout_weights_dtype(cfg, device.type))
    return Roles(actor=actor, rollout=rollout, reward=RewardWorker(cfg, tokenizer, device), reference=reference,
                 critic=critic, handoff=handoff)


def build_group_roles(cfg: HybridRLConfig, plan: RunPlan, tokenizer, total_steps: int) -> Roles:
    from hybridrl.trainer import group_roles as gr

    device, needs = torch.device(plan.device), plan.needs
    running = gr.launch_groups(cfg, plan, total_steps=total_steps)
    try:
        handoff = WeightHandoff(HANDOFF_BY_LAUNCHER[running.launcher], rollout_weights_dtype(cfg, device.type))
        on = running.role_group
        critic = None
        if needs.critic:
            critic = (build_critic(cfg, plan, None, device, total_steps) if plan.remote_critic
                      else gr.GroupCritic(on["critic"]))
        tp = cfg.actor_rollout_ref.rollout.tensor_model_parallel_size
        return Roles(actor=gr.GroupActor(on["actor"]), rollout=gr.GroupRollout(on["rollout"], handoff, tp),
                     reward=RewardWorker(cfg, tokenizer, device), critic=critic, group=running, handoff=handoff,
                     reference=gr.GroupReference(on["reference"]) if needs.reference else None)
    except BaseException:
        running.shutdown()
        raise
