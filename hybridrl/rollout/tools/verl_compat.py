"""verl's tool names, mapped onto hybridrl's: built-in tool classes named in a tool YAML, and the `verl.tools.*`
modules a user's tool file imports (`from verl.tools.base_tool import BaseTool`), so verl tool code loads
unchanged. Each mapping is announced once (logged), never applied silently.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

from hybridrl.utils.module_aliases import verl_installed, verl_module_aliases

logger = logging.getLogger("hybridrl.rollout.tools")

# verl class path (either snapshot) -> hybridrl class path.
VERL_TOOL_CLASSES: dict[str, str] = {
    "verl.tools.gsm8k_tool.Gsm8kTool": "hybridrl.rollout.tools.builtin.gsm8k.Gsm8kTool",
    "verl.tools.sandbox_fusion_tools.SandboxFusionTool": "hybridrl.rollout.tools.builtin.code_interpreter.CodeInterpreterTool",
    # verl-recipe ReTool's subclass (fenced code blocks, the last line printed); its file imports Ray and verl
    "recipe.retool.retool.CustomSandboxFusionTool":
        "hybridrl.rollout.tools.builtin.code_interpreter.RetoolCodeInterpreterTool",
}
# verl's tools removed before hybridrl has an equivalent: what to do instead.
VERL_TOOLS_NOT_YET: dict[str, str] = {
    "verl.tools.search_tool.SearchTool": "verl's retrieval search tool has no hybridrl equivalent; write it as a "
                                         "BaseTool subclass calling your retriever",
    "verl.tools.geo3k_tool.Geo3kTool": "multimodal (geometry image) tools are not supported",
    "verl.tools.image_zoom_in_tool.ImageZoomInTool": "multimodal (image) tools are not supported",
    "verl.tools.mcp_search_tool.MCPSearchTool": "MCP tools are not supported (verl removed them too)",
}
# verl module -> hybridrl module offering the same names, for tool files written against verl.
VERL_TOOL_MODULES: dict[str, str] = {
    "verl.tools.base_tool": "hybridrl.rollout.tools.base",
    "verl.tools.schemas": "hybridrl.rollout.tools.schema",
    "verl.tools.function_tool": "hybridrl.rollout.tools.function_tool",
}
_announced: set[str] = set()


def map_verl_class(class_name: str) -> str:
    """hybridrl's class path for a verl built-in tool class (announced once); other paths unchanged."""
    if class_name in VERL_TOOLS_NOT_YET:
        raise ValueError(f"tool class {class_name!r}: {VERL_TOOLS_NOT_YET[class_name]}")
    mapped = VERL_TOOL_CLASSES.get(class_name)
    if mapped is None:
        return class_name
    if class_name not in _announced:
        _announced.add(class_name)
        logger.info("tool class %s is verl's; using hybridrl's %s (same schema and behaviour, per-trajectory "
                    "lifecycle)", class_name, mapped)
    return mapped


@contextlib.contextmanager
def verl_tool_modules(source_file: str | None = None) -> Iterator[None]:
    """While loading user tool code (`source_file`, when known, only decides the notice):
    `verl.tools.{base_tool,schemas,function_tool}` resolve to hybridrl's modules (utils/module_aliases.py)."""
    with verl_module_aliases(VERL_TOOL_MODULES):
        yield
    if source_file and source_file not in _announced and not verl_installed() and _mentions_verl(source_file):
        _announced.add(source_file)
        logger.info("%s imports verl.tools.*: it gets hybridrl's BaseTool / ToolResponse / function_tool", source_file)


def _mentions_verl(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as handle:
            return "verl.tools" in handle.read()
    except OSError:
        return False
