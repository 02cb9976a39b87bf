"""One trajectory's simulated user: the row's interaction (multi_turn.interaction_config_path, picked by
`extra_info.interaction_kwargs.name`) driven through its lifecycle, traced and counted.

`start` runs before the first turn (an error there fails the row: the interaction cannot serve it);
`respond` after each model turn without tool calls; `finalize` at the end, also when the trajectory failed.
An error in `generate_response` or `finalize_interaction` (a user model's API timing out) ends or closes
only that trajectory: it is counted in `agent_loop/interaction_errors` and logged, first of each kind with
its traceback.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from hybridrl.rollout.agent.base import plain
from hybridrl.rollout.agent.output import AgentLoopMetrics
from hybridrl.rollout.trace import trace_span, tracing

logger = logging.getLogger("hybridrl.rollout.agent")
_logged_errors: set[tuple[str, str, str]] = set()  # (interaction, method, exception type) already logged in full


@dataclass
class InteractionReply:
    """verl's generate_response tuple: (should_terminate_sequence, response_text, score, metrics)."""

    should_terminate: bool
    text: str
    score: float | None
    metrics: dict[str, Any]


@dataclass
class InteractionTurns:
    interaction: Any  # a BaseInteraction
    kwargs: dict[str, Any]  # the row's interaction_kwargs, passed to every call (verl's)
    instance_id: str
    metrics: AgentLoopMetrics
    turn_metrics: list[dict[str, Any]] = field(default_factory=list)
    started: bool = False

    @classmethod
    def for_row(cls, interactions: dict[str, Any], row: dict[str, Any], extra_info: dict[str, Any],
                instance_id: str, metrics: AgentLoopMetrics) -> "InteractionTurns | None":
        """The row's interaction, or None when none is configured. A row must name one of the configured
        interactions (verl requires `interaction_kwargs.name` too)."""
        if not interactions:
            return None
        kwargs = plain(row.get("interaction_kwargs") or extra_info.get("interaction_kwargs") or {})
        name = kwargs.get("name") if isinstance(kwargs, dict) else None
        if name not in interactions:
            got = f"names interaction {name!r}" if name is not None else "has no extra_info.interaction_kwargs.name"
            raise ValueError(f"the row {got}, but the configured interactions are {sorted(interactions)} "
                             f"(actor_rollout_ref.rollout.multi_turn.interaction_config_path); give every row "
                             f"extra_info.interaction_kwargs = {{'name': one of those, ...its arguments}}")
        metrics.uses_interaction = True
        return cls(interactions[name], kwargs, instance_id, metrics)

    @property
    def name(self) -> str:
        return str(self.kwargs.get("name"))

    async def start(self) -> None:
        await self.interaction.start_interaction(self.instance_id, **self.kwargs)
        self.started = True

    async def respond(self, messages: list[dict[str, Any]]) -> InteractionReply | None:
        """The user's reply to the conversation so far; None when the interaction raised (counted, logged)."""
        inputs = {"messages": [dict(message) for message in messages]} if tracing() else None
        with trace_span(f"interaction:{self.name}", inputs, "AGENT") as span:
            try:
                answer = await self.interaction.generate_response(self.instance_id, messages, **self.kwargs)
                reply = _reply(answer, self.interaction)
            except Exception as error:
                self._failed("generate_response", error, "the trajectory ends on the model's last turn")
                span.set_outputs({"error": f"{type(error).__name__}: {error}"})
                return None
            span.set_outputs({"should_terminate_sequence": reply.should_terminate, "response": reply.text,
                              "score": reply.score, "metrics": reply.metrics})
        self.metrics.num_interaction_turns += 1
        self.turn_metrics.append(reply.metrics)
        return reply

    async def finalize(self) -> None:
        if not self.started:
            return
        try:
            await self.interaction.finalize_interaction(self.instance_id)
        except Exception as error:
            self._failed("finalize_interaction", error, "the trajectory's state may not be released")

    def _failed(self, method: str, error: Exception, consequence: str) -> None:
        self.metrics.num_interaction_errors += 1
        key = (self.name, method, type(error).__name__)
        first = key not in _logged_errors
        _logged_errors.add(key)
        logger.warning("interaction %r: %s raised %s: %s; %s (counted in agent_loop/interaction_errors)%s", self.name,
                       method, type(error).__name__, error, consequence,
                       "" if first else " [repeat; traceback logged once]", exc_info=error if first else None)


def _reply(answer: Any, interaction: Any) -> InteractionReply:
    if not isinstance(answer, tuple) or len(answer) != 4:
        raise TypeError(f"{type(interaction).__name__}.generate_response returned {type(answer).__name__} "
                        f"{str(answer)[:120]!r}; it must return (should_terminate_sequence, response_text, score, "
                        f"metrics), as verl's BaseInteraction does")
    should_terminate, text, score, metrics = answer
    return InteractionReply(bool(should_terminate), str(text), None if score is None else float(score),
                            dict(metrics or {}))
