"""Loading the run's tools: verl's tool YAML (`multi_turn.tool_config_path`) and function tools
(`multi_turn.function_tool_path`), merged into one name -> tool mapping.

Tool YAML (verl's format; `class_name` is an import path, verl's own built-in classes map onto hybridrl's):

    tools:
      - class_name: verl.tools.gsm8k_tool.Gsm8kTool
        config: {type: native}
        tool_schema:
          type: function
          function: {name: calc_gsm8k_reward, description: ..., parameters: {...}}
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Any, Union

import yaml

from hybridrl.rollout.tools.base import BaseTool
from hybridrl.rollout.tools.function_tool import FunctionTool, load_function_tools
from hybridrl.rollout.tools.schema import ToolSchema
from hybridrl.rollout.tools.verl_compat import map_verl_class, verl_tool_modules

Tool = Union[BaseTool, FunctionTool]
_TOOL_METHODS = ("create", "execute", "calc_reward", "release")


def load_all_tools(tool_config_path: str | None, function_tool_path: str | None) -> dict[str, Tool]:
    """Every configured tool by name; a name defined twice is an error naming both sources."""
    tools: dict[str, Tool] = {}
    sources: dict[str, str] = {}
    loaded: list[tuple[Tool, str]] = [(tool, f"tool_config_path={tool_config_path}")
                                      for tool in (load_tool_config(tool_config_path) if tool_config_path else [])]
    if function_tool_path:
        loaded += [(tool, f"function_tool_path={function_tool_path}") for tool in load_function_tools(function_tool_path)]
    for tool, source in loaded:
        if tool.name in tools:
            raise ValueError(f"tool name {tool.name!r} is defined twice ({sources[tool.name]} and {source}); tool names "
                             f"must be unique across multi_turn.tool_config_path and multi_turn.function_tool_path")
        tools[tool.name], sources[tool.name] = tool, source
    return tools


def load_tool_config(path: str) -> list[BaseTool]:
    """Instantiate the `BaseTool` classes listed in a verl tool YAML."""
    entries = _read_tool_yaml(path)
    return [_build_tool(entry, f"{path}: tools[{index}]") for index, entry in enumerate(entries)]


def _read_tool_yaml(path: str) -> list[dict[str, Any]]:
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"multi_turn.tool_config_path={path!r} does not exist")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        content = _load_yaml(text)
    except yaml.YAMLError as error:
        raise ValueError(f"multi_turn.tool_config_path={path!r} is not valid YAML: {error}") from None
    entries = content.get("tools") if isinstance(content, dict) else None
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ValueError(f"{path}: a tool config holds `tools:`, a list of {{class_name, config, tool_schema}} "
                         f"entries (verl's format); got {str(content)[:200]!r}")
    return entries


def _load_yaml(text: str) -> Any:
    """YAML, with `${...}` interpolations resolved as verl does (OmegaConf) when the file uses them."""
    if "${" not in text:
        return yaml.safe_load(text)
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.create(text), resolve=True)


def _build_tool(entry: dict[str, Any], where: str) -> BaseTool:
    class_name = entry.get("class_name")
    if not isinstance(class_name, str) or "." not in class_name:
        raise ValueError(f"{where}: class_name must be an import path such as "
                         f"hybridrl.rollout.tools.builtin.gsm8k.Gsm8kTool, got {class_name!r}")
    config = dict(entry.get("config") or {})
    tool_type = config.get("type", "native")
    if tool_type != "native":
        raise ValueError(f"{where}: config.type={tool_type!r}; only native tools exist (verl removed MCP tools too)")
    schema = entry.get("tool_schema")
    tool_schema = ToolSchema.from_dict(schema, where=f"{where}.tool_schema") if schema is not None else None
    cls = import_tool_class(class_name, where)
    tool = cls(config=config, tool_schema=tool_schema)
    missing = [name for name in _TOOL_METHODS if not callable(getattr(tool, name, None))]
    if missing or not getattr(tool, "name", None):
        raise TypeError(f"{where}: {class_name} lacks {missing or ['name']}; tool classes subclass "
                        f"hybridrl.rollout.tools.BaseTool")
    return tool


def import_tool_class(class_name: str, where: str) -> type:
    """The class at `module.path.Name` (verl's built-ins mapped to hybridrl's); an error names what is missing."""
    target = map_verl_class(class_name)
    module_name, _, attr = target.rpartition(".")
    try:
        with verl_tool_modules(_source_of(module_name)):
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise ValueError(f"{where}: tool class {class_name!r}: cannot import module {module_name!r} ({error}); "
                         f"check the path, and that its package is importable (on PYTHONPATH)") from error
    cls = getattr(module, attr, None)
    if not isinstance(cls, type):
        raise ValueError(f"{where}: tool class {class_name!r}: module {module_name!r} has no class {attr!r}")
    return cls


def _source_of(module_name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None else None
