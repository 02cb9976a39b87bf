"""Building what the trainer needs from the config: seeds, tokenizer, data, the number of steps."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

from hybridrl.config.schema import HybridRLConfig
from hybridrl.data.dataset import collate
from hybridrl.data.factory import build_rl_dataset, build_sampler
from hybridrl.data.loader import Rows, StatefulLoader
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


def _data_seed(cfg: HybridRLConfig) -> int:
    return cfg.data.seed if cfg.data.seed is not None else cfg.trainer.seed


def build_dataset(cfg: HybridRLConfig, tokenizer, split: str) -> Rows:
    """The `split` ("train" / "val") dataset: data.custom_cls when set, else RLDataset (hybridrl.data.factory)."""
    files = cfg.data.train_files if split == "train" else cfg.data.val_files
    return build_rl_dataset(cfg.data, _files(files), tokenizer, split, _data_seed(cfg))


def build_loader(cfg: HybridRLConfig, dataset: Rows, tokenizer, split: str) -> StatefulLoader:
    """The train loader (ordered by data.sampler when set) or the validation loader (file order)."""
    data = cfg.data

    def collate_fn(rows):
        return collate(rows, pad_token_id=tokenizer.pad_token_id, max_prompt_length=data.max_prompt_length)

    if split == "train":
        # data.gen_batch_size: the prompts of one generation batch (one DAPO dynamic-sampling round)
        size_key = "data.gen_batch_size" if data.gen_batch_size else "data.train_batch_size"
        return StatefulLoader(dataset, data.gen_batch_size or data.train_batch_size, shuffle=data.shuffle,
                              seed=_data_seed(cfg), drop_last=True, collate_fn=collate_fn, size_key=size_key,
                              sampler=build_sampler(data, dataset))
    batch_size = data.val_batch_size or len(dataset)
    return StatefulLoader(dataset, min(batch_size, len(dataset)), shuffle=False, seed=0, drop_last=False,
                          collate_fn=collate_fn, size_key="data.val_batch_size")


def total_training_steps(cfg: HybridRLConfig, num_batches_per_epoch: int) -> int:
    """`trainer.total_training_steps` when set, else epochs × batches per epoch (verl)."""
    total = num_batches_per_epoch * cfg.trainer.total_epochs
    if cfg.trainer.total_training_steps:
        total = cfg.trainer.total_training_steps
    return total


def default_local_dir(cfg: HybridRLConfig) -> str:
    return os.path.abspath(expand_path(cfg.trainer.default_local_dir))
