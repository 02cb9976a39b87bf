"""`tool_agent`: verl's ReAct loop with tool calls, a state machine PENDING -> GENERATING <-> PROCESSING_TOOLS
(and <-> INTERACTING with a simulated user) -> TERMINATED.

Turns: the model generates (stopping at the template's end-of-turn token, plus the parser's stop ids) with
at most the trajectory's remaining budget (`rollout.response_length` covers the whole trajectory); its
tool calls run (up to `multi_turn.max_parallel_calls`, concurrently); their responses, cut to
`max_tool_response_length` characters, are appended as observation tokens (mask 0) and the model
continues. A turn without tool calls ends the trajectory, unless an interaction is configured
(`multi_turn.interaction_config_path`; the row's `extra_info.interaction_kwargs.name` picks it): then the
simulated user answers (interaction_turns.py) and the model continues until the user ends the sequence.
It also stops when a turn did not end normally, the budget is used up, or `max_assistant_turns` /
`max_user_turns` (tool and user turns together, as in verl) is reached. A tool or user turn whose tokens
would reach the budget is dropped, so a trajectory always ends on the model's own tokens. num_turns =
user (tool and interaction) turns + assistant turns + 1, as verl counts.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hybridrl.rollout.agent.base import AgentLoopBase, plain
from hybridrl.rollout.agent.interaction_turns import InteractionTurns
from hybridrl.rollout.agent.output import AgentLoopOutput, TokenStream
from hybridrl.rollout.agent.parsers import get_tool_parser
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.tools.schema import ToolCall
from hybridrl.rollout.tools.session import ToolResult, ToolSession
from hybridrl.rollout.trace import trace_span, tracing


class AgentState(Enum):
    PENDING = "pending"
    GENERATING = "generating"
    PROCESSING_TOOLS = "processing_tools"
    TERMINATED = "terminated"
    INTERACTING = "interacting"


@dataclass
class TrajectoryState:
    """One trajectory's state; tools receive it as `agent_data` (their `extra_fields` may hold session data)."""

    request_id: str
    messages: list[dict[str, Any]]
    tools: dict[str, Any]
    tool_schemas: list[dict[str, Any]]
    tools_kwargs: dict[str, Any]
    stream: TokenStream = field(default_factory=lambda: TokenStream([]))  # the prompt is rendered in PENDING
    last_sampled: list[int] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    assistant_turns: int = 0
    user_turns: int = 0
    tool_rewards: list[float] = field(default_factory=list)
    turn_scores: list[float] = field(default_factory=list)
    extra_fields: dict[str, Any] = field(default_factory=dict)
    interaction: InteractionTurns | None = None


class ToolAgentLoop(AgentLoopBase):
    def __init__(self, context, **options: Any):
        super().__init__(context, **options)
        multi_turn = self.rollout_config.multi_turn
        self.max_assistant_turns = multi_turn.max_assistant_turns
        self.max_user_turns = multi_turn.max_user_turns
        self.max_parallel_calls = multi_turn.max_parallel_calls
        self.parser = get_tool_parser(multi_turn.format, self.tokenizer)
        self.stop_token_ids = list(dict.fromkeys(self.parser.stop_token_ids + self.renderer.boundary.stop_ids))

    async def run(self, sampling_params: SamplingParams, **row: Any) -> AgentLoopOutput:
        state = self._initial_state(row)
        session = ToolSession(state.tools, state.tools_kwargs, self.context.executors, self.context.tool_settings,
                              agent_data=state)
        handlers = {AgentState.PENDING: self._pending, AgentState.GENERATING: self._generating,
                    AgentState.PROCESSING_TOOLS: self._processing_tools, AgentState.INTERACTING: self._interacting}
        status = AgentState.PENDING
        try:
            if state.interaction is not None:
                await state.interaction.start()
            while status is not AgentState.TERMINATED:
                status = await handlers[status](state, sampling_params, session)
        finally:  # the per-trajectory lifecycle ends here, also when the trajectory failed
            try:
                tool_reward_scores = await session.close()
            finally:
                if state.interaction is not None:
                    await state.interaction.finalize()
        self._count_tool_metrics(session)
        extra = {**state.extra_fields, "turn_scores": state.turn_scores, "tool_rewards": state.tool_rewards,
                 "tool_reward_scores": tool_reward_scores}
        if state.interaction is not None:
            extra["interaction_metrics"] = state.interaction.turn_metrics
        return state.stream.to_output(num_turns=state.user_turns + state.assistant_turns + 1, metrics=self.metrics,
                                      extra_fields=extra)

    def _initial_state(self, row: dict[str, Any]) -> TrajectoryState:
        extra_info = plain(row.get("extra_info") or {})
        tools_kwargs = plain(row.get("tools_kwargs") or extra_info.get("tools_kwargs") or {})
        tools = self._selected_tools(extra_info.get("tool_selection"))
        request_id = uuid.uuid4().hex
        interaction = InteractionTurns.for_row(self.context.interactions, row, extra_info, request_id, self.metrics)
        return TrajectoryState(request_id=request_id, messages=self.row_messages(row), tools=tools,
                               tool_schemas=[tool.tool_schema.to_dict() for tool in tools.values()],
                               tools_kwargs=tools_kwargs, interaction=interaction)

    def _selected_tools(self, selection: list[str] | None) -> dict[str, Any]:
        """The run's tools, or the subset a row names in `extra_info.tool_selection`."""
        if not selection:
            return dict(self.context.tools)
        unknown = [name for name in selection if name not in self.context.tools]
        if unknown:
            raise ValueError(f"extra_info.tool_selection names tools {unknown} that are not configured; configured: "
                             f"{sorted(self.context.tools)} (multi_turn.tool_config_path / function_tool_path)")
        return {name: self.context.tools[name] for name in selection}

    # ------------------------------------------------------------ states
    async def _pending(self, state: TrajectoryState, params: SamplingParams, session: ToolSession) -> AgentState:
        prompt = await self._off_loop(self.prompt_ids, state.messages, state.tool_schemas or None)
        state.stream = TokenStream(prompt)
        return AgentState.GENERATING

    async def _generating(self, state: TrajectoryState, params: SamplingParams, session: ToolSession) -> AgentState:
        stream = state.stream
        turn = self.turn_params(params, self.response_length - len(stream), self.stop_token_ids)
        output = await self.generate(f"{state.request_id}-{state.assistant_turns}", stream.token_ids, turn)
        state.assistant_turns += 1
        stream.add_sampled(output.token_ids, output.log_probs)
        state.last_sampled = list(output.token_ids)
        if output.stop_reason != "stop" or len(stream) >= self.response_length:
            return AgentState.TERMINATED
        if self.max_assistant_turns and state.assistant_turns >= self.max_assistant_turns:
            return AgentState.TERMINATED
        if self.max_user_turns and state.user_turns >= self.max_user_turns:
            return AgentState.TERMINATED
        content, state.tool_calls = await self._off_loop(self.parser.parse, output.token_ids)
        state.messages.append(self._assistant_message(content, state.tool_calls))
        if state.tool_calls:
            return AgentState.PROCESSING_TOOLS
        return AgentState.INTERACTING if state.interaction is not None else AgentState.TERMINATED

    async def _processing_tools(self, state: TrajectoryState, params: SamplingParams, session: ToolSession) -> AgentState:
        calls = state.tool_calls[: self.max_parallel_calls]
        self.metrics.num_tool_calls_over_limit += len(state.tool_calls) - len(calls)
        start = time.perf_counter()
        results = await asyncio.gather(*(self._call_tool(session, call) for call in calls))
        self.metrics.tool_calls += time.perf_counter() - start
        state.tool_rewards.extend(0.0 if result.reward is None else result.reward for result in results)
        tool_messages = [_tool_message(call, result.text) for call, result in zip(calls, results)]
        state.messages.extend(tool_messages)
        if not await self._append_observation(state, tool_messages, "tool"):
            self.metrics.num_tool_turns_dropped += 1  # no room left to answer it: end on the model's own turn
            return AgentState.TERMINATED
        state.user_turns += 1
        return AgentState.GENERATING

    async def _interacting(self, state: TrajectoryState, params: SamplingParams, session: ToolSession) -> AgentState:
        """The simulated user's reply to a turn without tool calls; its score joins `turn_scores`. A reply that
        ends the sequence (or fails) is not appended: the trajectory ends on the model's own turn."""
        assert state.interaction is not None
        reply = await state.interaction.respond(state.messages)
        if reply is None:
            return AgentState.TERMINATED
        state.user_turns += 1
        if reply.score is not None:
            state.turn_scores.append(reply.score)
        message = {"role": "user", "content": reply.text}
        state.messages.append(message)
        if reply.should_terminate:
            return AgentState.TERMINATED
        if not await self._append_observation(state, [message], "user"):
            self.metrics.num_user_turns_dropped += 1
            return AgentState.TERMINATED
        return AgentState.GENERATING

    async def _append_observation(self, state: TrajectoryState, messages: list[dict[str, Any]], role: str) -> bool:
        """Tool / user `messages` as observation tokens (mask 0, log-prob 0) after the model's turn, with the glue
        closing that turn and the next generation prompt; False (nothing appended) when the budget has no room."""
        glue = self.renderer.boundary.glue_after(state.last_sampled)
        body, generation_prompt = await self._off_loop(self.renderer.observation_ids, messages,
                                                       state.tool_schemas or None)
        if len(state.stream) + len(glue) + len(body) + len(generation_prompt) >= self.response_length:
            return False
        state.stream.add_inserted(glue, "glue")
        state.stream.add_inserted(body, role)
        state.stream.add_inserted(generation_prompt, "glue")
        return True

    async def _call_tool(self, session: ToolSession, call: ToolCall) -> ToolResult:
        if not tracing():
            return await session.call(call)
        with trace_span(f"tool:{call.name}", {"arguments": call.arguments}, "TOOL") as span:
            result = await session.call(call)
            span.set_outputs({"text": result.text, "reward": result.reward})
        return result

    # ------------------------------------------------------------ pieces
    def _assistant_message(self, content: str, calls: list[ToolCall]) -> dict[str, Any]:
        """The turn as a chat message (only rendered again as part of later suffix diffs' context, never re-tokenized)."""
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [_openai_tool_call(call) for call in calls[: self.max_parallel_calls]]
        return message

    async def _off_loop(self, fn, *args):
        """Tokenizer work (chat templates, decoding) on the agent loops' threads, off the event loop."""
        return await self.context.executors.in_thread(lambda: fn(*args))

    def _count_tool_metrics(self, session: ToolSession) -> None:
        self.metrics.num_tool_calls += session.num_calls
        self.metrics.num_tool_responses_truncated += session.num_truncated
        for kind, count in session.error_counts.items():
            self.metrics.tool_errors[kind] = self.metrics.tool_errors.get(kind, 0) + count


def _openai_tool_call(call: ToolCall) -> dict[str, Any]:
    import json

    try:
        arguments = json.loads(call.arguments) if call.parse_error is None else call.arguments
    except json.JSONDecodeError:
        arguments = call.arguments  # kept as the model wrote it; the tool's answer says it was not JSON
    tool_call: dict[str, Any] = {"type": "function", "function": {"name": call.name, "arguments": arguments}}
    if call.tool_call_id is not None:
        tool_call["id"] = call.tool_call_id
    return tool_call


def _tool_message(call: ToolCall, text: str) -> dict[str, Any]:
    message = {"role": "tool", "content": text}
    if call.tool_call_id is not None:
        message["tool_call_id"] = call.tool_call_id
    return message
