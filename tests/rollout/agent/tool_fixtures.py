"""Tools the agent-loop tests load by import path (tool YAML `class_name`, `function_tool_path`)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from hybridrl.rollout.tools import BaseTool, ToolResponse, function_tool

EVENTS: list[tuple] = []  # (method, instance_id, detail) in call order, for lifecycle assertions


class CountingTool(BaseTool):
    """Per-trajectory state: counts its calls; calc_reward = the count; records every lifecycle call."""

    def __init__(self, config: dict, tool_schema=None):
        super().__init__(config, tool_schema)
        self.state: dict[str, dict] = {}

    async def create(self, instance_id=None, **kwargs: Any):
        instance_id, response = await super().create(instance_id)
        self.state[instance_id] = {"calls": 0, "secret": kwargs["create_kwargs"]["secret"]}
        EVENTS.append(("create", instance_id, dict(kwargs)))
        return instance_id, response

    async def execute(self, instance_id: str, parameters: dict, **kwargs: Any):
        record = self.state[instance_id]
        record["calls"] += 1
        EVENTS.append(("execute", instance_id, dict(parameters)))
        return ToolResponse(text=f"call {record['calls']} secret {record['secret']}"), 0.5, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        EVENTS.append(("calc_reward", instance_id, dict(kwargs)))
        return float(self.state[instance_id]["calls"])

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        EVENTS.append(("release", instance_id, dict(kwargs)))
        del self.state[instance_id]


class RaisingTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        raise RuntimeError("disk on fire")


class HangingTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        await asyncio.sleep(3600)


class GarbageTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return object()


SLOW_RELEASE: dict[str, Any] = {}  # "async": asyncio.Event, "thread": threading.Event, set by the test's engine


@function_tool
async def slow_async(x: int) -> str:
    """Wait until the other trajectories are done.

    Args:
        x: Ignored.
    """
    await asyncio.wait_for(SLOW_RELEASE["async"].wait(), timeout=20)
    return "released"


@function_tool
def slow_sync(x: int) -> str:
    """Block this thread until the other trajectories are done.

    Args:
        x: Ignored.
    """
    return "released" if SLOW_RELEASE["thread"].wait(timeout=20) else "stalled"


@function_tool
def blocking_forever(x: int) -> str:
    """Block until the test lets go.

    Args:
        x: Ignored.
    """
    SLOW_RELEASE.setdefault("forever", threading.Event()).wait(timeout=30)
    return "too late"


@function_tool
def garbage(x: int) -> object:
    """Return something that is not a response.

    Args:
        x: Ignored.
    """
    return None


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b
