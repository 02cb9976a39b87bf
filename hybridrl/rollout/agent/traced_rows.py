"""Which trajectories of an agent-loop batch are traced (rollout.trace.*), with verl's trace tags, and what
their root spans record. Tags: `step` (the trainer's global step, -1 outside training), `sample_index`
(the row's `index`, else `extra_info.index`, else its prompt's position), `rollout_n` (which of the prompt's
n samples), `validate`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from hybridrl.rollout.agent.output import AgentLoopOutput
from hybridrl.rollout.trace import RolloutTracer

_ROW_INPUTS = ("raw_prompt", "data_source", "agent_name", "index", "extra_info")


@dataclass(frozen=True)
class TrajectoryTrace:
    traced: bool = False
    tags: dict[str, Any] = field(default_factory=dict)


def plan_traces(tracer: RolloutTracer, rows: Sequence[dict[str, Any]], n: int, row_offset: int,
                meta: dict[str, Any]) -> list[TrajectoryTrace]:
    """One entry per row (rows hold each prompt's `n` samples together, as `Batch.repeat(interleave)` does)."""
    if not tracer.enabled:
        return [TrajectoryTrace() for _ in rows]
    step, validate = meta.get("global_steps", -1), bool(meta.get("validate"))
    samples = [_sample_index(row, (row_offset + i) // max(n, 1)) for i, row in enumerate(rows)]
    chosen = tracer.traced_rows(samples, seed=f"{step}:{row_offset}:{validate}")
    return [TrajectoryTrace(i in chosen, {"step": step, "sample_index": sample, "rollout_n": (row_offset + i) % max(n, 1),
                                          "validate": validate})
            for i, sample in enumerate(samples)]


def _sample_index(row: dict[str, Any], fallback: int) -> Any:
    index = row.get("index")
    if index is None and isinstance(row.get("extra_info"), dict):
        index = row["extra_info"].get("index")
    return fallback if index is None else index


def root_inputs(row: dict[str, Any]) -> dict[str, Any]:
    from hybridrl.rollout.agent.base import plain

    return {key: plain(row[key]) for key in _ROW_INPUTS if row.get(key) is not None}


def root_outputs(tracer: RolloutTracer, output: AgentLoopOutput) -> dict[str, Any]:
    """The trajectory as trained on: ids, mask, turns, scores (and the decoded prompt/response with token2text)."""
    outputs: dict[str, Any] = {"prompt_ids": output.prompt_ids, "response_ids": output.response_ids,
                               "response_mask": output.response_mask, "num_turns": output.num_turns,
                               "reward_score": output.reward_score,
                               "spans": [(span.role, span.start, span.end) for span in output.spans],
                               **{key: value for key, value in output.extra_fields.items()
                                  if key in ("turn_scores", "tool_rewards", "tool_reward_scores")}}
    if tracer.settings.token2text:
        outputs["prompt_text"] = tracer.text(output.prompt_ids)["text"]
        outputs["response_text"] = tracer.text(output.response_ids)["text"]
    return outputs
