"""Helpers for the reward-manager tests: a config with overrides, and rows."""

from __future__ import annotations

from hybridrl.config import load_config
from hybridrl.rewards.managers import RewardRows


def config(*overrides: str):
    return load_config(list(overrides))


def rows(texts, truths, lengths=None, sources=None, extra=None) -> RewardRows:
    count = len(texts)
    return RewardRows(list(texts), list(sources or ["openai/gsm8k"] * count), list(truths),
                      list(extra or [None] * count), list(lengths or [10] * count))
