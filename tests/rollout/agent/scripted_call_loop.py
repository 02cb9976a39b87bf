"""`tool_agent` whose first turn is a fixed hermes call (a random tiny model never writes one), loaded by import path
through `agent_loop_config_path`, so that worker ranks in other processes run it too. Every later turn is the
real engine's. The scripted tokens carry log-prob -1 (they were not sampled; the trainer recomputes old
log-probs from the actor)."""

from __future__ import annotations

from hybridrl.rollout.agent.tool_agent import ToolAgentLoop
from hybridrl.rollout.base import SamplingParams, TokenOutput

FIRST_TURN = '<tool_call>{"name": "calc_gsm8k_reward", "arguments": {"answer": "7"}}</tool_call><|im_end|>'
CONFIG = "- name: tool_agent\n  _target_: tests.rollout.agent.scripted_call_loop.ScriptedCallToolAgent\n"


class ScriptedCallToolAgent(ToolAgentLoop):
    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> TokenOutput:
        if not request_id.endswith("-0"):
            return await super().generate(request_id, prompt_ids, params)
        tokens = self.tokenizer(FIRST_TURN, add_special_tokens=False)["input_ids"]
        return TokenOutput(token_ids=tokens, log_probs=[-1.0] * len(tokens), stop_reason="stop")


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  **kwargs) -> float:
    """A reward that differs between a random model's trajectories (GSM8K accuracy would be 0 for all of them, and
    GRPO would have no advantage to learn from): the trajectory's length modulo 5, over 4."""
    return (len(solution_str) % 5) / 4
