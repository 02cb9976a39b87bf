"""Save and resume the trainer's state: roles, data position, RNG, step counter, KL controller.

The actor's and critic's state is saved by their groups (`save_checkpoint` on every rank; rank 0 writes the
unsharded state in verl's layout), so a checkpoint resumes on any number of ranks; the controller writes
the data position and its own counters, and commits the step atomically (`checkpoint.manager`).
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import torch

from hybridrl.algorithms.kl import FixedKLController
from hybridrl.checkpoint.manager import begin_save, commit_save, find_resume_dir, read_trainer_state
from hybridrl.config.schema import HybridRLConfig
from hybridrl.data.loader import StatefulLoader
from hybridrl.logging.log import get_logger
from hybridrl.trainer.setup import default_local_dir
from hybridrl.workers.launch import Roles

log = get_logger("hybridrl.checkpoint")


class CheckpointedRun(Protocol):
    """What a checkpoint holds of a run (the trainer)."""

    cfg: HybridRLConfig
    roles: Roles
    train_loader: StatefulLoader
    global_step: int
    kl_ctrl: FixedKLController  # or its adaptive subclass


def root_dir(cfg: HybridRLConfig) -> str:
    return default_local_dir(cfg)


def save(run: CheckpointedRun) -> str:
    cfg, roles = run.cfg, run.roles
    root = root_dir(cfg)
    tmp = begin_save(root, run.global_step)
    roles.actor.save_checkpoint(os.path.join(tmp, "actor"), list(cfg.actor_rollout_ref.actor.checkpoint.save_contents))
    if roles.critic is not None:  # a frozen remote critic writes nothing
        roles.critic.save_checkpoint(os.path.join(tmp, "critic"), list(cfg.critic.checkpoint.save_contents))
    torch.save(run.train_loader.state_dict(), os.path.join(tmp, "data.pt"))
    state: dict[str, Any] = {"global_step": run.global_step, "kl_ctrl": run.kl_ctrl.state_dict()}
    final = commit_save(root, tmp, run.global_step, state, keep=cfg.trainer.max_actor_ckpt_to_keep)
    log.info(f"saved checkpoint {final}")
    return final


def maybe_resume(run: CheckpointedRun) -> None:
    cfg = run.cfg
    path = find_resume_dir(root_dir(cfg), cfg.trainer.resume_mode, cfg.trainer.resume_from_path)
    if path is None:
        return
    run.roles.actor.load_checkpoint(os.path.join(path, "actor"), list(cfg.actor_rollout_ref.actor.checkpoint.load_contents))
    if run.roles.critic is not None:
        run.roles.critic.load_checkpoint(os.path.join(path, "critic"), list(cfg.critic.checkpoint.load_contents))
    data_state = os.path.join(path, "data.pt")
    if os.path.exists(data_state):
        run.train_loader.load_state_dict(torch.load(data_state, weights_only=False))
    state = read_trainer_state(path)
    run.global_step = state["global_step"]
    run.kl_ctrl.load_state_dict(state["kl_ctrl"])
    run.roles.rollout.sync_weights()
    log.info(f"resumed from {path}: continuing at step {run.global_step + 1}")
