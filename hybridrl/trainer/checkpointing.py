"""Save and resume the trainer's state: roles, data position, RNG, step counter, KL controller.

The actor's and critic's state is saved by their groups (`save_checkpoint` on every rank; rank 0 writes the
unsharded state in verl's layout), so a checkpoint resumes on any number of ranks; the controller writes
the data position and its own counters, and commits the step atomically (`checkpoint.manager`).
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from hybridrl.algorithms.kl import FixedKLController
from hybridrl.checkpoint.manager import (begin_save, commit_save, discard_on_failure, find_resume_dir,
                                         load_data_state, read_trainer_state, save_data_state)
from hybridrl.checkpoint.rotation import Retention
from hybridrl.checkpoint.state_io import load_state, save_state
from hybridrl.checkpoint.startup import announce_start
from hybridrl.config.schema import HybridRLConfig
from hybridrl.data.loader import StatefulLoader
from hybridrl.logging.log import get_logger
from hybridrl.trainer.setup import default_local_dir
from hybridrl.workers.launch import Roles

log = get_logger("hybridrl.checkpoint")
EXTRAS_STEM = "trainer_state_extras"


class CheckpointedRun(Protocol):
    """What a checkpoint holds of a run (the trainer)."""

    cfg: HybridRLConfig
    roles: Roles
    train_loader: StatefulLoader
    global_step: int
    kl_ctrl: FixedKLController  # or its adaptive subclass
    resumed_from: str | None  # the checkpoint this run resumed from (rotation never removes it)

    def checkpoint_extras(self) -> dict:
        """More state to save (`trainer_state_extras.json`), e.g. the asynchronous trainer's buffer; {} for none."""
        ...

    def load_checkpoint_extras(self, state: dict) -> None: ...


class CheckpointExtras:
    """No state beyond the roles and the data position; the asynchronous trainer saves its buffer here."""

    def checkpoint_extras(self) -> dict:
        return {}

    def load_checkpoint_extras(self, state: dict) -> None:
        """`state`: what `checkpoint_extras` returned when the checkpoint was saved ({} when it holds none)."""


def root_dir(cfg: HybridRLConfig) -> str:
    return default_local_dir(cfg)


def save(run: CheckpointedRun) -> str:
    cfg, roles = run.cfg, run.roles
    root = root_dir(cfg)
    retention = Retention.from_config(cfg)
    protect = [run.resumed_from] if run.resumed_from else []
    tmp = begin_save(root, run.global_step, retention, protect=protect)
    with discard_on_failure(tmp):  # a failed save (e.g. disk full) leaves no partial folder behind
        roles.actor.save_checkpoint(os.path.join(tmp, "actor"),
                                    list(cfg.actor_rollout_ref.actor.checkpoint.save_contents))
        if roles.critic is not None:  # a frozen remote critic writes nothing
            roles.critic.save_checkpoint(os.path.join(tmp, "critic"), list(cfg.critic.checkpoint.save_contents))
        save_data_state(tmp, run.train_loader.state_dict())
        extras = run.checkpoint_extras()
        if extras:
            save_state(os.path.join(tmp, EXTRAS_STEM), extras)
        state: dict[str, Any] = {"global_step": run.global_step, "kl_ctrl": run.kl_ctrl.state_dict(),
                                 "resumed_from": run.resumed_from}
        final = commit_save(root, tmp, run.global_step, state, keep=retention, protect=protect)
    log.info(f"saved checkpoint {final}")
    return final


def maybe_resume(run: CheckpointedRun) -> None:
    cfg = run.cfg
    path = find_resume_dir(root_dir(cfg), cfg.trainer.resume_mode, cfg.trainer.resume_from_path)
    announce_start(root_dir(cfg), cfg, path)  # a fresh run in a used folder says what happens to its checkpoints
    if path is None:
        return
    # Each group checks what it restored against the checkpoint's manifest (checkpoint.role_files.restore_role).
    run.roles.actor.load_checkpoint(os.path.join(path, "actor"), list(cfg.actor_rollout_ref.actor.checkpoint.load_contents))
    if run.roles.critic is not None:
        run.roles.critic.load_checkpoint(os.path.join(path, "critic"), list(cfg.critic.checkpoint.load_contents))
    data_state = load_data_state(path)
    if data_state is not None:
        run.train_loader.load_state_dict(data_state)
    state = read_trainer_state(path)
    run.global_step = state["global_step"]
    run.kl_ctrl.load_state_dict(state["kl_ctrl"])
    extras = os.path.join(path, EXTRAS_STEM)
    run.load_checkpoint_extras(load_state(extras)[0] if os.path.exists(extras + ".json") else {})
    run.roles.rollout.sync_weights()
    run.resumed_from = path
    log.info(f"resumed from {path}: continuing at step {run.global_step + 1}")
