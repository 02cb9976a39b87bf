"""The agent-loop extension point: `AgentLoopBase.run(sampling_params, **row) -> AgentLoopOutput`.

A loop drives one trajectory: it renders the row's messages, calls the engine (token ids in, token ids
and log-probs out; `RequestEngine.generate`), runs tools or an environment between turns, and returns
the trajectory's tokens with the mask of what the model sampled. `row` holds the prompt batch's
per-row fields (verl's names): `raw_prompt` (the chat messages; `data.return_raw_chat=True`),
`data_source`, `reward_model`, `extra_info`, `index`, `agent_name`, `tools_kwargs` when present, ...

A loop instance serves one trajectory (a fresh one per row, as verl builds them), so it may keep
per-trajectory state on `self`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from hybridrl.rollout.agent.chat_tokens import ChatRenderer
from hybridrl.rollout.agent.output import AgentLoopMetrics, AgentLoopOutput
from hybridrl.rollout.base import STOP_REASONS, RequestEngine, SamplingParams, TokenOutput
from hybridrl.rollout.trace import RolloutTracer, trace_span, tracing
from hybridrl.rollout.tools.executors import ToolExecutors
from hybridrl.rollout.tools.session import ToolSettings

logger = logging.getLogger("hybridrl.rollout.agent")
_warned_prompt_cut: set[str] = set()  # loop classes whose over-long prompts were already reported


@dataclass
class AgentLoopContext:
    """What every loop of a run shares: the engine, the tokenizer and its renderer, `rollout.*` settings
    (verl's attribute names: `prompt_length`, `response_length`, `multi_turn.*`), the run's tools, the
    executors and settings their calls use, the interactions (simulated users) by name, and the tracer."""

    engine: RequestEngine
    tokenizer: Any
    rollout_config: Any
    renderer: ChatRenderer
    tools: dict[str, Any]
    executors: ToolExecutors
    tool_settings: ToolSettings
    interactions: dict[str, Any] = field(default_factory=dict)
    tracer: RolloutTracer | None = None


class AgentLoopBase(ABC):
    """Subclass, implement `run`, register with `@register_agent_loop("name")` or list the class in
    `rollout.agent.agent_loop_config_path`; options from that YAML arrive as constructor keyword arguments."""

    def __init__(self, context: AgentLoopContext, **options: Any):
        if options:
            raise TypeError(f"{type(self).__name__} got options {sorted(options)} (from rollout.agent."
                            f"agent_loop_config_path) that its __init__ does not take; accept them as keyword arguments")
        self.context = context
        self.engine = context.engine
        self.tokenizer = context.tokenizer
        self.renderer = context.renderer
        self.rollout_config = context.rollout_config
        self.prompt_length: int = context.rollout_config.prompt_length
        self.response_length: int = context.rollout_config.response_length
        self.metrics = AgentLoopMetrics()

    @abstractmethod
    async def run(self, sampling_params: SamplingParams, **row: Any) -> AgentLoopOutput:
        """Run one trajectory. `sampling_params` has n=1 and the trajectory's own `row_offset` (its sampling key)."""

    # ------------------------------------------------------------ helpers for loops
    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> TokenOutput:
        """One engine request, timed and checked; if this trajectory is cancelled the request is aborted."""
        start = time.perf_counter()
        inputs = self._trace_inputs(request_id, prompt_ids, params) if tracing() else None
        with trace_span("generate", inputs, "LLM") as span:
            try:
                output = await self.engine.generate(request_id, prompt_ids, params)
            except asyncio.CancelledError:
                await self.engine.abort(request_id)
                raise
            if inputs is not None:
                span.set_outputs({"token_ids": list(output.token_ids), "stop_reason": output.stop_reason,
                                  **self._trace_text(output.token_ids)})
        self.metrics.generate_sequences += time.perf_counter() - start
        self.metrics.num_preempted += int(output.num_preempted or 0)
        self.metrics.prefix_cache_hit_tokens += int(output.prefix_cache_hit_tokens or 0)
        _check_token_output(output, params, request_id)
        return output

    def _trace_inputs(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> dict[str, Any]:
        return {"request_id": request_id, "prompt_ids": list(prompt_ids), "max_new_tokens": params.max_new_tokens,
                "temperature": params.temperature, **self._trace_text(prompt_ids)}

    def _trace_text(self, token_ids: Sequence[int]) -> dict[str, str]:
        tracer = self.context.tracer
        return tracer.text(token_ids) if tracer is not None else {}

    def turn_params(self, params: SamplingParams, max_new_tokens: int,
                    stop_token_ids: Sequence[int] = ()) -> SamplingParams:
        """`params` for one turn: its token budget and extra stop ids (kept with the ones already set)."""
        stops = tuple(dict.fromkeys([*params.stop_token_ids, *stop_token_ids]))
        return dataclasses.replace(params, n=1, max_new_tokens=max_new_tokens, stop_token_ids=stops)

    def row_messages(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """The row's chat messages (`raw_prompt`) as plain dicts."""
        messages = row.get("raw_prompt")
        if messages is None:
            raise ValueError(f"{type(self).__name__} needs each row's chat messages (`raw_prompt`): set "
                             f"data.return_raw_chat=True")
        if isinstance(messages, str):
            return [{"role": "user", "content": messages}]
        return [plain(message) for message in messages]

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The rendered first prompt, left-truncated to rollout.prompt_length as verl does, warned once per loop class
        and counted per trajectory (agent_loop/num_prompts_truncated)."""
        ids = self.renderer.initial_prompt(messages, tools=tools)
        if len(ids) <= self.prompt_length:
            return ids
        self.metrics.num_prompt_tokens_cut = len(ids) - self.prompt_length
        if type(self).__name__ in _warned_prompt_cut:
            return ids[len(ids) - self.prompt_length:]
        _warned_prompt_cut.add(type(self).__name__)
        logger.warning("agent-loop prompt of %d tokens (tool schemas included) exceeds rollout.prompt_length=%d; its "
                       "first %d tokens are cut (counted in agent_loop/num_prompts_truncated). Raise "
                       "data.max_prompt_length, or shorten the system prompt / tool descriptions",
                       len(ids), self.prompt_length, len(ids) - self.prompt_length)
        return ids[len(ids) - self.prompt_length:]


def _check_token_output(output: TokenOutput, params: SamplingParams, request_id: str) -> None:
    """The RequestEngine contract, checked where a broken engine would otherwise corrupt training rows."""
    problems = []
    if len(output.token_ids) != len(output.log_probs):
        problems.append(f"{len(output.token_ids)} tokens but {len(output.log_probs)} log-probs")
    if len(output.token_ids) > params.max_new_tokens:
        problems.append(f"{len(output.token_ids)} tokens for max_new_tokens={params.max_new_tokens}")
    if output.stop_reason not in STOP_REASONS:
        problems.append(f"stop_reason {output.stop_reason!r} (expected one of {STOP_REASONS})")
    if problems:
        raise RuntimeError(f"the rollout engine broke the request contract on {request_id}: {'; '.join(problems)}")


def plain(value: Any) -> Any:
    """Row values as plain Python: parquet/numpy arrays -> lists, numpy scalars -> Python scalars (recursively)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
