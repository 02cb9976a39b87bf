"""One trajectory's tool calls: the per-trajectory lifecycle, the per-call timeout, errors as text for the model,
and truncation of long responses.

Errors never end the trajectory: the model reads what went wrong (verl's wording) and may try again, and
each is counted by kind (`agent_loop/tool_errors/<kind>`): `unknown_tool`, `invalid_arguments` (the call's
JSON, or arguments that are not an object), `exception`, `timeout`, `invalid_return`. Failures after the
model is done (`calc_reward`, `release`) are logged and counted as `calc_reward_failed` / `release_failed`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hybridrl.rollout.tools.base import BaseTool
from hybridrl.rollout.tools.executors import ToolExecutors
from hybridrl.rollout.tools.function_tool import FunctionTool, run_function
from hybridrl.rollout.tools.results import InvalidToolReturn, ToolOutcome, from_execute_return, from_function_return
from hybridrl.rollout.tools.schema import ToolCall

logger = logging.getLogger("hybridrl.rollout.tools")

ERROR_KINDS = ("unknown_tool", "invalid_arguments", "exception", "timeout", "invalid_return")
TRUNCATE_SIDES = ("left", "right", "middle")


@dataclass
class ToolSettings:
    """`multi_turn.*` keys a session needs (and `multi_turn.tool_call_timeout`, hybridrl's)."""

    max_response_chars: int = 256
    truncate_side: str = "middle"
    timeout_s: float = 60.0


@dataclass
class ToolResult:
    """A call's text for the model, its step reward (None: none given), metrics, error kind (None when it
    worked), whether the text was cut to max_response_chars, and how long it took."""

    text: str
    reward: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    truncated: bool = False
    seconds: float = 0.0


def truncate_response(text: str, max_chars: int, side: str) -> str:
    """verl's cut to `max_chars` characters: `left` keeps the end, `right` the start, `middle` both ends,
    with a "(truncated)" marker where text was removed."""
    if len(text) <= max_chars:
        return text
    if side == "left":
        return "(truncated)..." + text[len(text) - max_chars:]
    if side == "right":
        return text[:max_chars] + "...(truncated)"
    if side != "middle":
        raise ValueError(f"multi_turn.tool_response_truncate_side={side!r} is not one of {TRUNCATE_SIDES}")
    head = max_chars // 2
    return text[:head] + "...(truncated)..." + text[len(text) - head:]


class _ToolRaised(Exception):
    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class ToolSession:
    """The tools of one trajectory. `tools_kwargs`: the row's `{tool: {create_kwargs, execute_kwargs,
    calc_reward_kwargs, release_kwargs}}`. Call `close()` when the trajectory ends (calc_reward, release)."""

    def __init__(self, tools: dict[str, BaseTool | FunctionTool], tools_kwargs: dict[str, Any] | None,
                 executors: ToolExecutors, settings: ToolSettings, agent_data: Any = None):
        self.tools = tools
        self.tools_kwargs = {name: dict(value or {}) for name, value in (tools_kwargs or {}).items()}
        self.executors = executors
        self.settings = settings
        self.agent_data = agent_data
        self.error_counts: Counter[str] = Counter()
        self.num_calls = 0
        self.num_truncated = 0
        self._instances: dict[str, asyncio.Task] = {}

    async def call(self, call: ToolCall) -> ToolResult:
        """Run one call (creating the tool's instance on its first use); every failure becomes an error text."""
        start = time.perf_counter()
        self.num_calls += 1
        result = await self._checked_call(call)
        if result.error:
            self.error_counts[result.error] += 1
            logger.debug("tool call %s failed (%s): %s", call.name, result.error, result.text)
        shown = truncate_response(result.text, self.settings.max_response_chars, self.settings.truncate_side)
        if shown != result.text:
            self.num_truncated += 1
            result.text, result.truncated = shown, True
        result.seconds = time.perf_counter() - start
        return result

    async def _checked_call(self, call: ToolCall) -> ToolResult:
        name = call.name
        if call.parse_error is not None:
            return ToolResult(f"Invalid JSON in arguments for '{name}': {call.parse_error}", error="invalid_arguments")
        if name not in self.tools:
            return ToolResult(f"Unknown function '{name}'. Available tools: {list(self.tools)}", error="unknown_tool")
        try:
            arguments = json.loads(call.arguments)
        except (json.JSONDecodeError, TypeError) as error:
            return ToolResult(f"Invalid JSON in arguments for '{name}': {error}", error="invalid_arguments")
        if not isinstance(arguments, dict):
            return ToolResult(f"Invalid JSON in arguments for '{name}': expected a JSON object, got "
                              f"{type(arguments).__name__}", error="invalid_arguments")
        timeout = self.settings.timeout_s
        try:
            outcome = await asyncio.wait_for(self._guarded(self.tools[name], arguments), timeout)
        except asyncio.TimeoutError:
            return ToolResult(f"Error executing tool '{name}': timed out after {timeout:g} s", error="timeout")
        except InvalidToolReturn as error:
            return ToolResult(f"Error executing tool '{name}': {error}", error="invalid_return")
        except _ToolRaised as raised:
            return ToolResult(f"Error executing tool '{name}': {raised.error}", error="exception")
        except Exception as error:
            return ToolResult(f"Error executing tool '{name}': {error}", error="exception")
        return ToolResult(outcome.text, outcome.reward, outcome.metrics)

    async def _guarded(self, tool: BaseTool | FunctionTool, arguments: dict[str, Any]) -> ToolOutcome:
        """`_run`, with a TimeoutError the tool raises itself told apart from the session's own timeout."""
        try:
            return await self._run(tool, arguments)
        except (TimeoutError, asyncio.TimeoutError) as error:
            raise _ToolRaised(error) from error

    async def _run(self, tool: BaseTool | FunctionTool, arguments: dict[str, Any]) -> ToolOutcome:
        if isinstance(tool, FunctionTool):
            return from_function_return(await run_function(tool, arguments, self.executors))
        instance_id = await self._instance(tool)
        execute_kwargs = self.tools_kwargs.get(tool.name, {}).get("execute_kwargs") or {}
        result = await tool.execute(instance_id, arguments, agent_data=self.agent_data, **execute_kwargs)
        return from_execute_return(result)

    async def _instance(self, tool: BaseTool) -> str:
        """The trajectory's instance of `tool`, created on first use; calls racing in one turn share it."""
        task = self._instances.get(tool.name)
        if task is None:
            create_kwargs = self.tools_kwargs.get(tool.name, {}).get("create_kwargs") or {}
            task = asyncio.ensure_future(tool.create(create_kwargs=dict(create_kwargs)))
            self._instances[tool.name] = task
        try:
            instance_id, _ = await asyncio.shield(task)
        except BaseException:
            if task.done():  # a failed creation is retried by the next call; a cancelled wait leaves it running
                self._instances.pop(tool.name, None)
            raise
        return instance_id

    async def close(self) -> dict[str, float | None]:
        """End the trajectory: `calc_reward` then `release` for every instance created; returns the rewards by
        tool name (None where calc_reward failed)."""
        rewards: dict[str, float | None] = {}
        for name, task in self._instances.items():
            instance = await self._created(name, task)
            if instance is None:
                continue
            kwargs = self.tools_kwargs.get(name, {})
            rewards[name] = await self._finish(name, "calc_reward", instance,
                                               kwargs.get("calc_reward_kwargs") or {})
            await self._finish(name, "release", instance, kwargs.get("release_kwargs") or {})
        self._instances.clear()
        return rewards

    async def _created(self, name: str, task: asyncio.Task) -> str | None:
        try:
            return (await asyncio.wait_for(asyncio.shield(task), self.settings.timeout_s))[0]
        except Exception:  # the calls that waited for it already reported the failure to the model
            task.cancel()
            return None

    async def _finish(self, name: str, method: str, instance_id: str, kwargs: dict[str, Any]) -> float | None:
        tool = self.tools[name]
        try:
            value = await asyncio.wait_for(getattr(tool, method)(instance_id, **kwargs), self.settings.timeout_s)
            return float(value) if method == "calc_reward" else None
        except Exception as error:
            self.error_counts[f"{method}_failed"] += 1
            logger.warning("tool %s: %s(%s) failed at the end of a trajectory (%s: %s); counted in "
                           "agent_loop/tool_errors/%s_failed", name, method, instance_id, type(error).__name__,
                           error, method)
            return None
