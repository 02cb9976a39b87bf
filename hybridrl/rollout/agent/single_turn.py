"""`single_turn_agent`: one generation for the row's prompt (verl's default agent loop)."""

from __future__ import annotations

import uuid
from typing import Any

from hybridrl.rollout.agent.base import AgentLoopBase
from hybridrl.rollout.agent.output import AgentLoopOutput, TokenStream
from hybridrl.rollout.base import SamplingParams


class SingleTurnAgentLoop(AgentLoopBase):
    """The rendered prompt, one engine request of up to rollout.response_length tokens; num_turns = 2."""

    async def run(self, sampling_params: SamplingParams, **row: Any) -> AgentLoopOutput:
        stream = TokenStream(self.prompt_ids(self.row_messages(row)))
        params = self.turn_params(sampling_params, self.response_length)
        output = await self.generate(uuid.uuid4().hex, stream.token_ids, params)
        stream.add_sampled(output.token_ids, output.log_probs)
        return stream.to_output(num_turns=2, metrics=self.metrics,
                                extra_fields={"turn_scores": [], "tool_rewards": []})
