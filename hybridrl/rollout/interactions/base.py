"""The interaction extension point (verl's `verl.interactions.base.BaseInteraction`, January-2026 tree): a
simulated user that answers the model when a turn ends without a tool call.

One instance serves every trajectory of a run, so per-trajectory state is kept by `instance_id` (the
trajectory's request id). The tool agent loop calls, per trajectory:
`start_interaction(instance_id, **interaction_kwargs)` once before the first turn,
`generate_response(instance_id, messages, **interaction_kwargs)` after each model turn without tool calls
(`messages`: the conversation so far, OpenAI-style dicts, the model's turn last), and
`finalize_interaction(instance_id)` once at the end, also when the trajectory failed. `interaction_kwargs`
is the row's `extra_info.interaction_kwargs` (its `name` picks the interaction).
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4


class BaseInteraction:
    """Subclass and override the async methods; `config` is the YAML entry's `config` mapping plus `name`."""

    def __init__(self, config: dict[str, Any]):
        self.config = config
        self.name: str = config.get("name", "interaction_agent")

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Start a trajectory's record; returns its instance id (a new uuid when none is given)."""
        return instance_id if instance_id is not None else str(uuid4())

    async def generate_response(self, instance_id: str, messages: list[dict[str, Any]],
                                **kwargs: Any) -> tuple[bool, str, float, dict[str, Any]]:
        """The user's reply to the model's last turn: (should_terminate_sequence, response_content,
        current_turn_score, additional_data). The score lands in the trajectory's `turn_scores`."""
        return False, "Your current result seems acceptable.", 0.8, {}

    async def calculate_score(self, instance_id: str | None = None, **kwargs: Any) -> float:
        """A turn-level score of the trajectory so far (subclasses usually call it from generate_response)."""
        return 0.0

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs: Any) -> None:
        """Release the trajectory's state."""
