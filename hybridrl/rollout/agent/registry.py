"""Agent loops by name: the built-ins (`single_turn_agent`, `tool_agent`), classes registered in code with
`@register_agent_loop`, and `rollout.agent.agent_loop_config_path` (verl's YAML: a list of
`{name, _target_: import.path.Class, **constructor options}`).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import yaml

BUILTIN_LOOPS = {"single_turn_agent": "hybridrl.rollout.agent.single_turn.SingleTurnAgentLoop",
                 "tool_agent": "hybridrl.rollout.agent.tool_agent.ToolAgentLoop"}
_REGISTERED: dict[str, type] = {}  # classes registered in code (user loops)


def register_agent_loop(name: str) -> Callable[[type], type]:
    """Class decorator: rows with `agent_name: <name>` run this loop."""

    def decorate(cls: type) -> type:
        _REGISTERED[name] = cls
        return cls

    return decorate


@dataclass
class AgentLoopSpec:
    cls: type
    options: dict[str, Any] = field(default_factory=dict)


def agent_loop_specs(config_path: str | None = None) -> dict[str, AgentLoopSpec]:
    """Every loop a run can use: built-ins, then classes registered in code, then the YAML's entries (each may
    replace an earlier one of the same name)."""
    specs = {name: AgentLoopSpec(_import_class(target, "built-in agent loop")) for name, target in BUILTIN_LOOPS.items()}
    specs.update({name: AgentLoopSpec(cls) for name, cls in _REGISTERED.items()})
    if config_path:
        specs.update(load_agent_loop_config(config_path))
    return specs


def load_agent_loop_config(path: str) -> dict[str, AgentLoopSpec]:
    expanded = os.path.expanduser(path)
    if not os.path.isfile(expanded):
        raise FileNotFoundError(f"actor_rollout_ref.rollout.agent.agent_loop_config_path={path!r} does not exist")
    with open(expanded, encoding="utf-8") as handle:
        entries = yaml.safe_load(handle)
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ValueError(f"{path}: an agent loop config is a list of {{name, _target_, ...options}} entries (verl's "
                         f"format); got {str(entries)[:200]!r}")
    specs = {}
    for index, entry in enumerate(entries):
        entry = dict(entry)
        name, target = entry.pop("name", None), entry.pop("_target_", None)
        if not isinstance(name, str) or not isinstance(target, str):
            raise ValueError(f"{path}: entry {index} needs `name` and `_target_` (an import path such as "
                             f"my_pkg.loops.MyAgentLoop), got {sorted(entry) + ['name', '_target_']!r}")
        specs[name] = AgentLoopSpec(_import_class(target, f"{path}: entry {index} ({name})"), entry)
    return specs


def _import_class(target: str, where: str) -> type:
    from hybridrl.rollout.agent.base import AgentLoopBase

    module_name, _, attr = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attr, None) if module_name else None
    except ImportError as error:
        raise ValueError(f"{where}: cannot import {target!r} ({error}); is its package on PYTHONPATH?") from error
    if not isinstance(cls, type) or not issubclass(cls, AgentLoopBase):
        raise ValueError(f"{where}: {target!r} is not an agent loop class (a subclass of "
                         f"hybridrl.rollout.agent.AgentLoopBase)")
    return cls
