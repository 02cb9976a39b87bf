"""A base for the settings records the algorithms read: dataclass attributes, also readable the way
verl's configs are (`cfg.get("key", default)`, `cfg["key"]`), so code written against verl's config
objects reads them unchanged."""

from __future__ import annotations

from typing import Any


class VerlStyleRecord:
    """Mixin for frozen dataclasses: `.get(name, default)` and `[name]` like verl's BaseConfig."""

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)

    def __getitem__(self, key: str) -> Any:
        if not hasattr(self, key):
            raise KeyError(key)
        return getattr(self, key)
