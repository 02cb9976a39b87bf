"""What an agent loop returns for one trajectory, and the token stream it builds it from.

The masking rule (normative): `response_mask` is 1 exactly on tokens the engine sampled, verbatim, the stop
token included; 0 (and rollout log-prob 0.0) on tool / user observation tokens, on template glue the
framework inserts (a generation prompt, Qwen's `\\n` after `<|im_end|>`) and on padding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SPAN_ROLES = ("assistant", "glue", "tool", "user", "system")


@dataclass
class Span:
    """A run of response tokens [start, end) of one kind: `assistant` (sampled, trained on), `glue` (template
    tokens the framework inserted), `tool` / `user` / `system` (observation messages)."""

    role: str
    start: int
    end: int

    @property
    def trained(self) -> bool:
        return self.role == "assistant"


@dataclass
class AgentLoopMetrics:
    """Per-trajectory measurements (verl's `AgentLoopMetrics` plus tool counts). Times in seconds."""

    generate_sequences: float = 0.0
    tool_calls: float = 0.0
    compute_score: float = 0.0
    num_preempted: int = 0
    prefix_cache_hit_tokens: int = 0
    num_tool_calls: int = 0
    num_tool_responses_truncated: int = 0
    num_tool_calls_over_limit: int = 0
    num_tool_turns_dropped: int = 0
    num_prompt_tokens_cut: int = 0
    tool_errors: dict[str, int] = field(default_factory=dict)
    uses_interaction: bool = False  # the trajectory had a simulated user (multi_turn.interaction_config_path)
    num_interaction_turns: int = 0  # the simulated user's replies (the one ending the trajectory included)
    num_interaction_errors: int = 0  # generate_response / finalize_interaction calls that raised
    num_user_turns_dropped: int = 0  # replies not appended: no budget left to answer them


@dataclass
class AgentLoopOutput:
    """One trajectory. `response_ids` holds the model's tokens and the observation / glue tokens between its
    turns; `response_mask` and `response_logprobs` align with it. `reward_score`: set when the loop scored
    the trajectory itself (it then lands in `rm_scores`). `num_turns` counts messages as verl does (user
    prompt + assistant turns + tool turns). `extra_fields` become per-row batch fields."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None = None
    reward_score: float | None = None
    num_turns: int = 2
    metrics: AgentLoopMetrics = field(default_factory=AgentLoopMetrics)
    extra_fields: dict[str, Any] = field(default_factory=dict)
    spans: list[Span] = field(default_factory=list)

    def check(self, response_length: int, where: str) -> None:
        """Raise when the parts disagree in length or break the masking rule's bookkeeping."""
        n = len(self.response_ids)
        if len(self.response_mask) != n or (self.response_logprobs is not None and len(self.response_logprobs) != n):
            raise ValueError(f"{where}: response_ids ({n}), response_mask ({len(self.response_mask)}) and "
                             f"response_logprobs ({None if self.response_logprobs is None else len(self.response_logprobs)}) "
                             f"must have one entry per response token")
        if n > response_length:
            raise ValueError(f"{where}: {n} response tokens exceed rollout.response_length={response_length}, the "
                             f"whole trajectory's budget; cap each turn's max_new_tokens at the remaining budget")
        if any(value not in (0, 1) for value in self.response_mask):
            raise ValueError(f"{where}: response_mask must hold only 0 and 1")


@dataclass
class TokenStream:
    """A trajectory's append-only tokens: the prompt, then response tokens with their mask, log-probs and spans."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)

    def add_sampled(self, token_ids: list[int], log_probs: list[float]) -> None:
        """The engine's tokens, verbatim: trained on (mask 1) with their rollout log-probs."""
        if len(log_probs) != len(token_ids):
            raise ValueError(f"the engine returned {len(token_ids)} tokens but {len(log_probs)} log-probs")
        self._add(token_ids, "assistant", mask=1, log_probs=list(log_probs))

    def add_inserted(self, token_ids: list[int], role: str) -> None:
        """Tokens the framework adds (observations, template glue): mask 0, log-prob 0.0."""
        self._add(token_ids, role, mask=0, log_probs=[0.0] * len(token_ids))

    def _add(self, token_ids: list[int], role: str, mask: int, log_probs: list[float]) -> None:
        if not token_ids:
            return
        if role not in SPAN_ROLES:
            raise ValueError(f"span role {role!r} is not one of {SPAN_ROLES}")
        start = len(self.response_ids)
        self.response_ids.extend(int(token) for token in token_ids)
        self.response_mask.extend([mask] * len(token_ids))
        self.response_logprobs.extend(float(value) for value in log_probs)
        if self.spans and self.spans[-1].role == role and self.spans[-1].end == start:
            self.spans[-1].end = len(self.response_ids)
        else:
            self.spans.append(Span(role, start, len(self.response_ids)))

    @property
    def token_ids(self) -> list[int]:
        """Everything so far: what the next generation turn is conditioned on."""
        return self.prompt_ids + self.response_ids

    def __len__(self) -> int:
        """Response tokens so far (what counts against rollout.response_length)."""
        return len(self.response_ids)

    def to_output(self, **kwargs: Any) -> AgentLoopOutput:
        return AgentLoopOutput(prompt_ids=list(self.prompt_ids), response_ids=list(self.response_ids),
                               response_mask=list(self.response_mask), response_logprobs=list(self.response_logprobs),
                               spans=[Span(s.role, s.start, s.end) for s in self.spans], **kwargs)
