"""Shared pieces of the agent-loop tests: a scripted RequestEngine, a rollout config and a manager factory."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Callable

from hybridrl.config.schema_rollout import RolloutConfig
from hybridrl.rollout.base import SamplingParams, TokenOutput

CALC_SCHEMA = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate arithmetic.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}


def tool_call(name: str, **arguments) -> str:
    """A hermes tool-call block exactly as the tiny ChatML template renders one."""
    import json

    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def fake_log_prob(position: int) -> float:
    """A distinct, never-zero log-prob per generated position (so a 0.0 can only come from a mask-0 token)."""
    return -0.01 * (position + 1)


@dataclass
class Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams


@dataclass
class ScriptedEngine:
    """A `RequestEngine` that answers from a script: `respond(prompt_text, turn)` gives the text the "model"
    writes, where `turn` counts the assistant turns already in the prompt. The text is tokenized, cut after the
    first stop / EOS token (kept; stop_reason "stop") or at max_new_tokens ("length")."""

    tokenizer: object
    respond: Callable[[str, int], str]
    delay_s: float = 0.0
    requests: list[Request] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    aborted: list[str] = field(default_factory=list)
    served: int = 0
    on_served: Callable[["ScriptedEngine"], None] | None = None

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> TokenOutput:
        assert params.n == 1
        self.requests.append(Request(request_id, list(prompt_ids), params))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
            text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
            turn = text.count("<|im_start|>assistant") - 1
            ids = self.tokenizer(self.respond(text, turn), add_special_tokens=False)["input_ids"]
        finally:
            self.in_flight -= 1
        stops = set(params.stop_token_ids) | set(params.eos_token_ids) | {self.tokenizer.eos_token_id}
        end = next((i + 1 for i, token in enumerate(ids) if token in stops), None)
        reason = "stop" if end is not None and end <= params.max_new_tokens else "length"
        ids = ids[: min(end or len(ids), params.max_new_tokens)]
        self.served += 1
        if self.on_served is not None:
            self.on_served(self)
        return TokenOutput(token_ids=ids, log_probs=[fake_log_prob(i) for i in range(len(ids))], stop_reason=reason,
                           prefix_cache_hit_tokens=len(prompt_ids) // 2)

    async def abort(self, request_id: str) -> TokenOutput | None:
        self.aborted.append(request_id)
        return None


def rollout_config(prompt_length: int = 256, response_length: int = 256, **multi_turn) -> RolloutConfig:
    cfg = RolloutConfig()
    cfg.prompt_length, cfg.response_length = prompt_length, response_length
    for key, value in multi_turn.items():
        if key in ("num_workers", "default_agent_loop", "agent_loop_config_path"):
            setattr(cfg.agent, key, value)
        else:
            setattr(cfg.multi_turn, key, value)
    return cfg
