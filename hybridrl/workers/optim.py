"""Optimizer and LR schedule from verl's `optim.*` keys (AdamW, constant or cosine with warmup)."""

from __future__ import annotations

import math

import torch

SCHEDULER_TYPES = ("constant", "cosine")


def build_optimizer(params, optim_cfg) -> torch.optim.Optimizer:
    name = getattr(optim_cfg, "optimizer", "AdamW") or "AdamW"
    if name.lower() != "adamw":
        raise ValueError(f"optim.optimizer={name!r} is not supported; hybridrl uses AdamW (set optim.optimizer=AdamW)")
    trainable = [p for p in params if p.requires_grad]
    kwargs = dict(lr=optim_cfg.lr, betas=tuple(optim_cfg.betas), weight_decay=optim_cfg.weight_decay)
    overrides = getattr(optim_cfg, "override_optimizer_config", None) or {}
    if trainable and all(p.is_cuda for p in trainable) and not {"fused", "foreach"} & set(overrides):
        kwargs["fused"] = True  # one kernel per step instead of foreach's chain; override_optimizer_config wins
    kwargs.update(overrides)
    return torch.optim.AdamW(trainable, **kwargs)


def warmup_steps(optim_cfg, total_training_steps: int) -> int:
    """verl: `lr_warmup_steps` if > 0, else `int(lr_warmup_steps_ratio * total_training_steps)`."""
    steps = optim_cfg.lr_warmup_steps
    if steps is None or steps <= 0:
        steps = int(optim_cfg.lr_warmup_steps_ratio * total_training_steps)
    return steps


def build_lr_scheduler(optimizer: torch.optim.Optimizer, optim_cfg,
                       total_training_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """One scheduler step per `update_actor`/`update_critic` call, as verl."""
    kind = optim_cfg.lr_scheduler_type
    if kind not in SCHEDULER_TYPES:
        raise ValueError(f"optim.lr_scheduler_type={kind!r}; use one of {SCHEDULER_TYPES}")
    warmup = warmup_steps(optim_cfg, total_training_steps)
    min_ratio, cycles = optim_cfg.min_lr_ratio or 0.0, optim_cfg.num_cycles

    def lr_lambda(step: int) -> float:
        if step < warmup:
            return float(step) / float(max(1, warmup))
        if kind == "constant":
            return 1.0
        progress = float(step - warmup) / float(max(1, total_training_steps - warmup))
        cosine = 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * progress))
        return max(0.0, min_ratio + (1.0 - min_ratio) * cosine)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
