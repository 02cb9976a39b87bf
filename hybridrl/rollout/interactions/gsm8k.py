"""verl's GSM8K interaction (`verl.interactions.gsm8k_interaction.Gsm8kInteraction`), same behaviour: after
each model turn without a tool call, the model's last answer is scored with the GSM8K rule (strict `#### N`
extraction, 1.0 if it equals the ground truth, else 0.0); a right answer ends the trajectory with "Your
response is correct!", a wrong one asks the model to reflect and try again (the turn's score, 0.0, is kept).

Rows carry `extra_info.interaction_kwargs = {"name": "gsm8k", "query": ..., "ground_truth": ...}`
(`hybridrl preprocess gsm8k` with verl's `gsm8k_multiturn_w_interaction.py` layout).
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from hybridrl.rewards.gsm8k import compute_score
from hybridrl.rollout.interactions.base import BaseInteraction

CORRECT = "Your response is correct!"
INCORRECT = "Your response is incorrect! You need to reflect on your answer and try again."


class Gsm8kInteraction(BaseInteraction):
    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self._instance_dict: dict[str, dict[str, Any]] = {}

    async def start_interaction(self, instance_id: str | None = None, ground_truth: str | None = None,
                                **kwargs: Any) -> str:
        if ground_truth is None:
            raise ValueError("the gsm8k interaction needs the row's answer: put it in "
                             "extra_info.interaction_kwargs.ground_truth (verl's gsm8k_multiturn_w_interaction layout)")
        instance_id = instance_id if instance_id is not None else str(uuid4())
        self._instance_dict[instance_id] = {"response": "", "ground_truth": str(ground_truth), "reward": 0.0}
        return instance_id

    async def generate_response(self, instance_id: str, messages: list[dict[str, Any]],
                                **kwargs: Any) -> tuple[bool, str, float, dict[str, Any]]:
        content = next((message.get("content") or "" for message in reversed(messages)
                        if message.get("role") == "assistant"), "")
        self._instance_dict[instance_id]["response"] = content
        reward = await self.calculate_score(instance_id)
        if reward == 1.0:
            return True, CORRECT, reward, {}
        return False, INCORRECT, reward, {}

    async def calculate_score(self, instance_id: str | None = None, **kwargs: Any) -> float:
        record = self._instance_dict[str(instance_id)]
        return compute_score(record["response"], record["ground_truth"], method="strict", format_score=0.0, score=1.0)

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs: Any) -> None:
        self._instance_dict.pop(str(instance_id), None)
