"""Interactions for the agent-loop tests, loaded by import path from an interaction YAML like a user's."""

from __future__ import annotations

from typing import Any

from hybridrl.rollout.interactions import BaseInteraction

EVENTS: list[tuple[str, str]] = []  # (event, instance_id), every RecordingUser's, in order


class RecordingUser(BaseInteraction):
    """Replies "again" (score 0.25) until the model says "done"; `fail_on` makes generate_response raise on that
    reply number (1-based). Records its lifecycle in EVENTS."""

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.fail_on = config.get("fail_on")
        self.replies: dict[str, int] = {}

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        EVENTS.append(("start", str(instance_id)))
        self.replies[str(instance_id)] = 0
        return str(instance_id)

    async def generate_response(self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any):
        self.replies[instance_id] += 1
        if self.replies[instance_id] == self.fail_on:
            raise ConnectionError("user model unreachable")
        EVENTS.append(("reply", instance_id))
        done = "done" in messages[-1]["content"]
        return done, "again", 0.25, {"reply": self.replies[instance_id]}

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs: Any) -> None:
        EVENTS.append(("finalize", str(instance_id)))
        del self.replies[str(instance_id)]


def compute_score_with_turn_scores(data_source: str, solution_str: str, ground_truth: str,
                                   extra_info: dict | None = None, **kwargs: Any) -> float:
    """A reward reading the simulated user's per-turn scores the way a verl reward function does (extra_info),
    plus a length term so a random model's trajectories differ (GRPO needs different scores)."""
    if not extra_info or "turn_scores" not in extra_info:
        raise KeyError(f"extra_info has no turn_scores: {sorted(extra_info or {})}")
    return sum(extra_info["turn_scores"]) + (len(solution_str) % 5) / 4
