"""Save and resume the trainer's state: roles, data position, RNG, step counter, KL controller."""

from __future__ import annotations

import os

import torch

from hybridrl.checkpoint.hf_export import LORA_ADAPTER_DIR, save_hf_metadata, save_hf_model
from hybridrl.checkpoint.manager import (begin_save, commit_save, find_resume_dir, load_role, read_trainer_state,
                                         save_role, set_rng_state)
from hybridrl.config.schema import HybridRLConfig
from hybridrl.logging.log import get_logger
from hybridrl.trainer.group_roles import GroupRole
from hybridrl.trainer.setup import default_local_dir

log = get_logger("hybridrl.checkpoint")


def root_dir(cfg: HybridRLConfig) -> str:
    return default_local_dir(cfg)


def save(trainer) -> str:
    cfg, roles = trainer.cfg, trainer.roles
    root = root_dir(cfg)
    tmp = begin_save(root, trainer.global_step)
    _save_role(os.path.join(tmp, "actor"), roles.actor, trainer.tokenizer,
               list(cfg.actor_rollout_ref.actor.checkpoint.save_contents))
    if _has_state(roles.critic):
        _save_role(os.path.join(tmp, "critic"), roles.critic, trainer.tokenizer,
                   list(cfg.critic.checkpoint.save_contents))
    torch.save(trainer.train_loader.state_dict(), os.path.join(tmp, "data.pt"))
    state = {"global_step": trainer.global_step, "kl_ctrl": trainer.kl_ctrl.state_dict()}
    final = commit_save(root, tmp, trainer.global_step, state, keep=cfg.trainer.max_actor_ckpt_to_keep)
    log.info(f"saved checkpoint {final}")
    return final


def _has_state(worker) -> bool:
    """A critic to checkpoint: not absent, not a frozen remote one (which has no state)."""
    return worker is not None and (isinstance(worker, GroupRole) or hasattr(worker, "state_dict"))


def _save_role(role_dir: str, worker, tokenizer, contents: list[str]) -> None:
    if isinstance(worker, GroupRole):  # on worker ranks: rank 0 writes the same files from the gathered state
        worker.save_checkpoint(role_dir, contents)
        return
    save_role(role_dir, worker.state_dict(), contents)
    save_hf_metadata(worker.model, tokenizer, role_dir)
    if getattr(worker, "lora", False):  # the adapter in peft format, what LoRA users ship
        from hybridrl.models.lora import save_adapter

        save_adapter(worker.model, os.path.join(role_dir, LORA_ADAPTER_DIR))
    if "hf_model" in contents:
        save_hf_model(worker.model, tokenizer, os.path.join(role_dir, "huggingface"))


def maybe_resume(trainer) -> None:
    cfg = trainer.cfg
    path = find_resume_dir(root_dir(cfg), cfg.trainer.resume_mode, cfg.trainer.resume_from_path)
    if path is None:
        return
    _load_role(os.path.join(path, "actor"), trainer.roles.actor,
               list(cfg.actor_rollout_ref.actor.checkpoint.load_contents))
    if _has_state(trainer.roles.critic):
        _load_role(os.path.join(path, "critic"), trainer.roles.critic, list(cfg.critic.checkpoint.load_contents))
    data_state = os.path.join(path, "data.pt")
    if os.path.exists(data_state):
        trainer.train_loader.load_state_dict(torch.load(data_state, weights_only=False))
    state = read_trainer_state(path)
    trainer.global_step = state["global_step"]
    trainer.kl_ctrl.load_state_dict(state["kl_ctrl"])
    trainer.roles.rollout.sync_weights(trainer.roles.actor.named_weights())
    log.info(f"resumed from {path}: continuing at step {trainer.global_step + 1}")


def _load_role(role_dir: str, worker, contents: list[str]) -> None:
    if isinstance(worker, GroupRole):  # every rank reads the unsharded files and loads its shard
        worker.load_checkpoint(role_dir, contents)
        return
    state = load_role(role_dir, contents)
    worker.load_checkpoint_state(state)
    if "extra" in state:
        set_rng_state(state["extra"]["rng"])
