"""Tools for agent loops: verl's `BaseTool` interface with a per-trajectory lifecycle, plain functions as tools,
verl's tool YAML, and built-ins (calculator, GSM8K answer check)."""

from hybridrl.rollout.tools.base import BaseTool
from hybridrl.rollout.tools.function_tool import FunctionTool, function_tool
from hybridrl.rollout.tools.registry import load_all_tools
from hybridrl.rollout.tools.schema import OpenAIFunctionToolSchema, ToolCall, ToolResponse, ToolSchema
from hybridrl.rollout.tools.session import ToolResult, ToolSession, ToolSettings

__all__ = ["BaseTool", "FunctionTool", "OpenAIFunctionToolSchema", "ToolCall", "ToolResponse", "ToolResult",
           "ToolSchema", "ToolSession", "ToolSettings", "function_tool", "load_all_tools"]
