"""A user agent loop, loaded by `agent_loop_config_path` in test_manager.py: scores its own trajectories."""

from __future__ import annotations

import asyncio
import uuid

from hybridrl.rollout.agent import AgentLoopBase, AgentLoopOutput, TokenStream


class ScoredLoop(AgentLoopBase):
    """One generation; the score is `bonus` plus the number of sampled tokens (so each row's differs)."""

    def __init__(self, context, bonus: float = 0.0, **options):
        super().__init__(context, **options)
        self.bonus = bonus

    async def run(self, sampling_params, **row) -> AgentLoopOutput:
        stream = TokenStream(self.prompt_ids(self.row_messages(row)))
        output = await self.generate(uuid.uuid4().hex, stream.token_ids,
                                     self.turn_params(sampling_params, self.response_length))
        stream.add_sampled(output.token_ids, output.log_probs)
        return stream.to_output(reward_score=self.bonus + len(output.token_ids), metrics=self.metrics,
                                extra_fields={"row_offset": sampling_params.row_offset})


class FailingLoop(AgentLoopBase):
    async def run(self, sampling_params, **row) -> AgentLoopOutput:
        if row["extra_info"]["index"] == 1:
            await asyncio.sleep(0.05)  # let the other rows' requests start
            raise KeyError("missing field")
        await self.generate("never-ends", [1, 2, 3], self.turn_params(sampling_params, 4))
        raise AssertionError("unreachable: the engine never answers this request")
