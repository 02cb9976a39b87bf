"""Building what the trainer needs from the config: seeds, tokenizer, data, the number of steps."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

from hybridrl.config.schema import HybridRLConfig
from hybridrl.data.dataset import RLDataset, collate
from hybridrl.data.loader import StatefulLoader
from hybridrl.models.hf import expand_path, load_policy_tokenizer


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_tokenizer(cfg: HybridRLConfig):
    from hybridrl.models.megatron import is_megatron_checkpoint

    model_cfg = cfg.actor_rollout_ref.model
    if not model_cfg.tokenizer_path and is_megatron_checkpoint(expand_path(model_cfg.path)):
        from hybridrl.config import ConfigError

        raise ConfigError(f"actor_rollout_ref.model.path={model_cfg.path!r} is a Megatron-LM checkpoint, which has no "
                          f"tokenizer: set actor_rollout_ref.model.tokenizer_path to an HF tokenizer directory")
    return load_policy_tokenizer(model_cfg, trust_remote_code=cfg.data.trust_remote_code)


def _files(value: str | list[str]) -> list[str | Path]:
    files = [value] if isinstance(value, str) else list(value)
    return [expand_path(f) for f in files]


def build_dataset(cfg: HybridRLConfig, tokenizer, split: str) -> RLDataset:
    data = cfg.data
    files = data.train_files if split == "train" else data.val_files
    max_samples = data.train_max_samples if split == "train" else data.val_max_samples
    return RLDataset(_files(files), tokenizer, max_prompt_length=data.max_prompt_length, prompt_key=data.prompt_key,
                     reward_fn_key=data.reward_fn_key, truncation=data.truncation,
                     filter_overlong_prompts=data.filter_overlong_prompts, max_samples=max_samples,
                     return_raw_chat=data.return_raw_chat, apply_chat_template_kwargs=data.apply_chat_template_kwargs,
                     seed=data.seed if data.seed is not None else cfg.trainer.seed,
                     media_keys=(data.image_key, data.video_key),
                     require_ground_truth=True)  # the reward role reads reward_model.ground_truth of every row


def build_loader(cfg: HybridRLConfig, dataset: RLDataset, tokenizer, split: str) -> StatefulLoader:
    data = cfg.data

    def collate_fn(rows):
        return collate(rows, pad_token_id=tokenizer.pad_token_id, max_prompt_length=data.max_prompt_length)

    if split == "train":
        seed = data.seed if data.seed is not None else cfg.trainer.seed
        return StatefulLoader(dataset, data.gen_batch_size or data.train_batch_size, shuffle=data.shuffle,
                              seed=seed, drop_last=True, collate_fn=collate_fn)
    batch_size = data.val_batch_size or len(dataset)
    return StatefulLoader(dataset, min(batch_size, len(dataset)), shuffle=False, seed=0, drop_last=False,
                          collate_fn=collate_fn)


def total_training_steps(cfg: HybridRLConfig, num_batches_per_epoch: int) -> int:
    """`trainer.total_training_steps` when set, else epochs × batches per epoch (verl)."""
    total = num_batches_per_epoch * cfg.trainer.total_epochs
    if cfg.trainer.total_training_steps:
        total = cfg.trainer.total_training_steps
    return total


def default_local_dir(cfg: HybridRLConfig) -> str:
    return os.path.abspath(expand_path(cfg.trainer.default_local_dir))
