"""The models package's error type, apart from the loaders so that every loader (HF, Megatron-LM) can raise it."""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """A model or tokenizer could not be loaded from the configured path."""
