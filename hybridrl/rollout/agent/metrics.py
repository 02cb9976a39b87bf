"""Step metrics of the agent loops (verl's names) and the per-turn view of a trajectory for the rollout dump.

verl's names: `agent_loop/{generate_sequences,tool_calls,compute_score,num_preempted}/{min,max,mean}`
(per-trajectory seconds spent generating / in tool calls), `agent_loop/slowest/*` (the trajectory that
bounded the step), `num_turns/{min,max,mean}`, `tool_call_counts/{min,max,mean}` (tool calls per
trajectory). hybridrl's additions: `agent_loop/num_tool_calls/*` (= tool_call_counts/*),
`agent_loop/tool_errors/<kind>` and `/total` (calls answered with an error text), truncation and budget
counts, `rollout/prefix_cache_hit_tokens` (prompt tokens of all turns served from the prefix cache);
with interactions (simulated users), `agent_loop/num_interaction_turns/*` (replies per trajectory),
`agent_loop/interaction_errors` (interaction calls that raised) and `agent_loop/num_user_turns_dropped`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from hybridrl.rollout.agent.output import AgentLoopMetrics, AgentLoopOutput, Span

_TIMED = ("generate_sequences", "tool_calls", "compute_score", "num_preempted")
_COUNTED = ("num_tool_responses_truncated", "num_tool_calls_over_limit", "num_tool_turns_dropped")


def _stats(name: str, values: np.ndarray) -> dict[str, float]:
    return {f"{name}/min": float(values.min()), f"{name}/max": float(values.max()), f"{name}/mean": float(values.mean())}


def agent_loop_metrics(outputs: Sequence[AgentLoopOutput]) -> dict[str, float]:
    """One step's metrics over its trajectories (empty for no trajectories)."""
    return trajectory_metrics([o.metrics for o in outputs], [o.num_turns for o in outputs],
                              [len(o.prompt_ids) for o in outputs], [len(o.response_ids) for o in outputs])


def trajectory_metrics(per_trajectory: Sequence[AgentLoopMetrics], num_turns: Sequence[int],
                       prompt_lengths: Sequence[int], response_lengths: Sequence[int]) -> dict[str, float]:
    """`agent_loop_metrics` from each trajectory's record, turn count and lengths (what the trainer's controller
    has once the ranks' rows are joined: the figures are over every trajectory of the step)."""
    if not per_trajectory:
        return {}
    metrics: dict[str, float] = {}
    per_traj = {name: np.array([getattr(m, name) for m in per_trajectory], dtype=float) for name in _TIMED}
    for name, values in per_traj.items():
        metrics.update(_stats(f"agent_loop/{name}", values))
    slowest = int(np.argmax(per_traj["generate_sequences"] + per_traj["tool_calls"] + per_traj["compute_score"]))
    for name in _TIMED:
        metrics[f"agent_loop/slowest/{name}"] = float(per_traj[name][slowest])
    metrics["agent_loop/slowest/prompt_length"] = float(prompt_lengths[slowest])
    metrics["agent_loop/slowest/response_length"] = float(response_lengths[slowest])
    metrics.update(_stats("num_turns", np.array(num_turns, dtype=float)))
    tool_calls = np.array([m.num_tool_calls for m in per_trajectory], dtype=float)
    metrics.update(_stats("agent_loop/num_tool_calls", tool_calls))
    metrics.update(_stats("tool_call_counts", tool_calls))  # verl's name for the same counts (metric_utils.py)
    metrics.update(_error_counts(per_trajectory))
    for name in _COUNTED:
        metrics[f"agent_loop/{name}"] = float(sum(getattr(m, name) for m in per_trajectory))
    metrics["agent_loop/num_prompts_truncated"] = float(sum(m.num_prompt_tokens_cut > 0 for m in per_trajectory))
    metrics["rollout/prefix_cache_hit_tokens"] = float(sum(m.prefix_cache_hit_tokens for m in per_trajectory))
    metrics.update(_interaction_metrics(per_trajectory))
    return metrics


def _interaction_metrics(per_trajectory: Sequence[AgentLoopMetrics]) -> dict[str, float]:
    """Over the trajectories that had a simulated user; {} when none had one (a run without interactions)."""
    with_user = [m for m in per_trajectory if getattr(m, "uses_interaction", False)]
    if not with_user:
        return {}
    metrics = _stats("agent_loop/num_interaction_turns", np.array([m.num_interaction_turns for m in with_user], dtype=float))
    metrics["agent_loop/interaction_errors"] = float(sum(m.num_interaction_errors for m in with_user))
    metrics["agent_loop/num_user_turns_dropped"] = float(sum(m.num_user_turns_dropped for m in with_user))
    return metrics


def _error_counts(per_trajectory: Sequence[AgentLoopMetrics]) -> dict[str, float]:
    from hybridrl.rollout.tools.session import ERROR_KINDS

    totals = dict.fromkeys(ERROR_KINDS, 0)
    for record in per_trajectory:
        for kind, count in record.tool_errors.items():
            totals[kind] = totals.get(kind, 0) + count
    metrics = {f"agent_loop/tool_errors/{kind}": float(count) for kind, count in totals.items()}
    metrics["agent_loop/tool_errors/total"] = float(sum(totals[kind] for kind in ERROR_KINDS))
    return metrics


def rollout_turns(tokenizer: Any, response_ids: Sequence[int], spans: Sequence[Span | tuple] | None,
                  response_mask: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """One response as its turns, for `trainer.rollout_data_dir`: `[{"role", "text", "trained", "num_tokens"}]`
    in order, `trained` marking the spans the loss sees. Without spans (a loop that records none) the
    runs of `response_mask` are used, as `assistant` (1) and `observation` (0)."""
    pieces = [Span(*span) if isinstance(span, tuple) else span for span in spans or []]
    if not pieces and response_mask is not None:
        pieces = _mask_runs(list(response_mask)[: len(response_ids)])
    return [{"role": span.role,
             "text": tokenizer.decode(list(response_ids[span.start:span.end]), skip_special_tokens=False),
             "trained": span.trained, "num_tokens": span.end - span.start} for span in pieces]


def _mask_runs(mask: list[int]) -> list[Span]:
    runs: list[Span] = []
    for index, value in enumerate(mask):
        role = "assistant" if value else "observation"
        if runs and runs[-1].role == role:
            runs[-1].end = index + 1
        else:
            runs.append(Span(role, index, index + 1))
    return runs


def batch_rollout_turns(tokenizer: Any, batch: Any) -> list[list[dict[str, Any]]]:
    """`rollout_turns` for every row of an agent-loop batch (responses, response_mask, turn_spans)."""
    responses, mask = batch["responses"], batch["response_mask"]
    spans = batch.get("turn_spans")
    rows = []
    for i in range(responses.shape[0]):
        length = int(batch["attention_mask"][i, -responses.shape[1]:].sum())
        rows.append(rollout_turns(tokenizer, responses[i, :length].tolist(), None if spans is None else spans[i],
                                  mask[i, :length].tolist()))
    return rows


def rollout_turn_fields(tokenizer: Any, batch: Any) -> dict[str, list]:
    """The rollout dump's agent-loop fields (`trainer.rollout_data_dir`): `turns` (each row as its turns, marking
    the spans trained on) and `num_turns`; {} for a batch without agent-loop rows."""
    if "turn_spans" not in batch:
        return {}
    return {"turns": batch_rollout_turns(tokenizer, batch), "num_turns": [int(n) for n in batch["__num_turns__"]]}
