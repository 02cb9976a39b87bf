"""`BaseTool`: a stateful tool with verl's async interface (`create`, `execute`, `calc_reward`, `release`).

Lifecycle (differs from verl, see docs/agentic.md): one instance per trajectory. The first call of the
tool in a trajectory runs `create(create_kwargs=...)` (from the row's
`extra_info.tools_kwargs.<tool>.create_kwargs`); every call of that trajectory runs `execute` on the same
instance; when the trajectory ends, `calc_reward` is called once and stored with the trajectory
(`tool_reward_scores`), then `release`. verl creates and releases the instance around every single call,
so state such as the GSM8K tool's best-so-far reward never survives from one call to the next.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from hybridrl.rollout.tools.schema import ToolResponse, ToolSchema


class BaseTool:
    """Subclass and override `execute` (and `create` / `calc_reward` / `release` for per-trajectory state).

    Built from the tool YAML as `cls(config=<its config mapping>, tool_schema=<ToolSchema or None>)`; a class
    that knows its own schema overrides `get_openai_tool_schema`. Instances are shared by every trajectory
    of the run, so per-trajectory state lives in a dict keyed by `instance_id` (as verl's tools do)."""

    def __init__(self, config: dict, tool_schema: ToolSchema | dict | None = None):
        self.config = dict(config or {})
        if isinstance(tool_schema, dict):
            tool_schema = ToolSchema.from_dict(tool_schema, where=type(self).__name__)
        self.tool_schema = tool_schema or self.get_openai_tool_schema()
        if self.tool_schema is None:
            raise ValueError(f"{type(self).__name__} has no tool schema: give tool_schema in the tool YAML or "
                             f"override get_openai_tool_schema()")
        self.name = self.tool_schema.function.name

    def get_openai_tool_schema(self) -> ToolSchema | None:
        return getattr(self, "tool_schema", None)

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Start this tool's state for a trajectory; kwargs hold `create_kwargs` (the row's tools_kwargs).
        Returns the instance id and a response (unused by the loop, as in verl)."""
        return instance_id or str(uuid4()), ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        """Run one call with the model's arguments. Returns (response shown to the model, a step reward recorded
        in the trajectory's `tool_rewards`, metrics). kwargs: `agent_data` (the trajectory's state) and the
        row's `tools_kwargs.<tool>.execute_kwargs`."""
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The tool's verdict on the whole trajectory, called once at its end (kwargs: `calc_reward_kwargs`)."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Drop the trajectory's state (kwargs: `release_kwargs`)."""
