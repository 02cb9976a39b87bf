"""verl's GSM8K answer-check tool (`calc_gsm8k_reward`, class `verl.tools.gsm8k_tool.Gsm8kTool`).

`create(ground_truth=...)` (or `create_kwargs={"ground_truth": ...}`, from the row's
`extra_info.tools_kwargs.calc_gsm8k_reward.create_kwargs`) starts a trajectory's record; each call
`execute({"answer": ...})` scores the answer with the GSM8K rule (flexible extraction, 1.0 if right) and
returns `Current parsed answer='..' reward=..`; its step reward is 0.0 when the score improved on the
trajectory's best so far and -0.05 when it did not. That penalty needs the record to live for the whole
trajectory, which hybridrl's per-trajectory lifecycle gives (under verl's per-call create/release every
call starts from reward 0, so a repeated right answer is never penalised).
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from hybridrl.rewards.gsm8k import compute_score
from hybridrl.rollout.tools.base import BaseTool
from hybridrl.rollout.tools.schema import ToolResponse, ToolSchema

NO_IMPROVEMENT_PENALTY = -0.05
DEFAULT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "calc_gsm8k_reward",
        "description": "A tool for calculating the reward of gsm8k. (1.0 if parsed answer is correct, 0.0 if parsed "
                       "answer is incorrect or not correctly parsed)",
        "parameters": {"type": "object", "properties": {"answer": {
            "type": "string", "description": "The model's answer to the GSM8K math problem, must be a digits"}},
            "required": ["answer"]},
    },
}


class Gsm8kTool(BaseTool):
    def __init__(self, config: dict | None = None, tool_schema: ToolSchema | dict | None = None):
        super().__init__(config or {}, tool_schema or DEFAULT_SCHEMA)
        self._records: dict[str, dict[str, Any]] = {}

    async def create(self, instance_id: str | None = None, ground_truth: str | None = None,
                     **kwargs: Any) -> tuple[str, ToolResponse]:
        instance_id = instance_id or str(uuid4())
        if ground_truth is None:
            ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        if ground_truth is None:
            raise ValueError("calc_gsm8k_reward needs the row's ground truth: put it in "
                             "extra_info.tools_kwargs.calc_gsm8k_reward.create_kwargs.ground_truth "
                             "(hybridrl preprocess gsm8k --tool writes it)")
        self._records[instance_id] = {"response": "", "ground_truth": str(ground_truth), "reward": 0.0}
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        answer = parameters.get("answer", "")
        answer = answer if isinstance(answer, str) else str(answer)
        record = self._records[instance_id]
        record["response"] = answer if answer.startswith("#### ") else "#### " + answer
        reward = await self.calc_reward(instance_id)
        tool_reward = 0.0 if reward > record["reward"] else NO_IMPROVEMENT_PENALTY
        record["reward"] = reward
        return ToolResponse(text=f"Current parsed {answer=} {reward=}"), tool_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        record = self._records[instance_id]
        return compute_score(record["response"], record["ground_truth"], method="flexible", format_score=0.0,
                             score=1.0)

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._records.pop(instance_id, None)
