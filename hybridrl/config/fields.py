"""Helpers that declare schema fields with their one-line doc and loader hints (metadata).

Metadata keys: `doc` (one line, shown by print-config --docs), `ref` (a `${...}` default followed by
load_config unless the key is set), `choices` (allowed values, checked by validate_config) and `plus`
(verl's own YAML lacks the key, so verl scripts add it with `+key=...`; hybridrl accepts that).
"""

from __future__ import annotations

import copy
from dataclasses import field
from typing import Any, Callable


def setting(
    default: Any,
    doc: str,
    *,
    ref: str | None = None,
    choices: tuple[Any, ...] | None = None,
    plus: bool = False,
) -> Any:
    """A leaf key: its default (copied per instance when mutable), doc line and loader hints."""
    metadata = {"doc": doc, "ref": ref, "choices": choices, "plus": plus}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def section(factory: Callable[[], Any], doc: str, *, plus: bool = False) -> Any:
    """A nested group of keys (a dataclass), built by `factory` so sections can differ in defaults."""
    return field(default_factory=factory, metadata={"doc": doc, "ref": None, "choices": None, "plus": plus})


def field_doc(metadata: Any) -> str:
    """The doc line stored with a field (empty string when missing: a schema test forbids that)."""
    return metadata.get("doc", "") if metadata else ""

