"""Reward managers by `reward_manager.name` (verl's `naive`, `batch`, `dapo`, `prime`), or a class from a
file with `reward_manager.source=importlib`. `build_reward_manager(cfg, tokenizer)` makes the configured one.
"""

from __future__ import annotations

from typing import Any

from hybridrl.config.errors import ConfigError

from hybridrl.rewards.managers import batch, dapo, naive, prime  # noqa: F401 - they register themselves
from hybridrl.rewards.managers.base import (REWARD_MANAGERS, ManagerContext, RewardManager, RewardRows,
                                            get_reward_manager_cls, register)
from hybridrl.rewards.managers.context import manager_context
from hybridrl.rewards.managers.verl_class import build_class_manager


def build_reward_manager(cfg: Any, tokenizer: Any, offered_kwargs: dict | None = None) -> RewardManager:
    """The manager `cfg.reward_manager` names, built with `reward_model.reward_kwargs` as its arguments.
    `offered_kwargs`: what a custom function gets when it takes them (a served GenRM's address and tokenizer)."""
    context = manager_context(cfg, tokenizer, offered_kwargs)
    source, name = cfg.reward_manager.source, cfg.reward_manager.name
    if context.overlong_buffer is not None and (source, name) != ("register", "dapo"):
        raise ConfigError(f"reward_model.overlong_buffer.enable=true is DAPO's overlong penalty, which only the dapo "
                          f"reward manager applies, but reward_manager.name={name!r}; set reward_manager.name=dapo "
                          "(verl's DAPO recipe does) or reward_model.overlong_buffer.enable=false")
    if source == "importlib":
        return build_class_manager(cfg.reward_manager.module.path, name, context, dict(context.reward_kwargs))
    return get_reward_manager_cls(name)(context, **context.reward_kwargs)


__all__ = ["REWARD_MANAGERS", "ManagerContext", "RewardManager", "RewardRows", "build_reward_manager",
           "get_reward_manager_cls", "manager_context", "register"]
