"""The asynchronous trainer's step batch from finished prompt groups, and its off-policy metrics (verl's names).

- `training/off_policy/trajectory_spans/*`: policy versions one trajectory's tokens came from (1: a single one;
  more: it was parked across weight syncs and resumed).
- `training/off_policy/trajectory_staleness/*`: versions between the newest policy a trajectory used and the one
  trained now; `.../trajectory_staleness_worst/*` the same from the oldest (verl V1 trainer_base).
- `training/off_policy/evicted_samples` (+ `evicted_samples_staleness/*`): groups dropped this step for spanning
  more than trainer.v1.sampler.max_off_policy_threshold versions (`drop`); `.../evicted_running_samples` those of
  them cancelled while still generating (nothing more is generated for them).
- `fully_async/partial/{total_partial_num, partial_ratio, max_partial_span}`: trajectories trained now that were
  resumed after an abort (verl's fully-async names).
"""

from __future__ import annotations

import numpy as np
import torch

from hybridrl.trainer.batch_sources.trajectory_buffer import RUNNING, GroupRecord
from hybridrl.utils.batch import Batch
from hybridrl.workers.rollout import assemble


def assemble_groups(groups: list[GroupRecord], n: int, response_length: int, pad_token_id: int,
                    temperature: float) -> Batch:
    """The rows the synchronous trainer's generation returns for these prompts (a prompt's n samples together,
    verl's batch keys, `uid` = the group id), from the groups' kept tokens and log-probs."""
    prompts = _concat_rows([group.prompt for group in groups])
    token_ids = [tokens for group in groups for tokens in _result(group).token_ids]
    log_probs = [values for group in groups for values in _result(group).log_probs]
    batch = assemble(prompts, token_ids, log_probs, n, response_length, pad_token_id)
    batch["uid"] = [group.group_id for group in groups for _ in range(n)]
    batch.meta["temperature"] = temperature
    return batch


def _result(group: GroupRecord):
    if group.result is None:
        raise RuntimeError(f"prompt group {group.group_id} is in a training batch without its samples")
    return group.result


def _concat_rows(rows: list[Batch]) -> Batch:
    """Concatenate one-row batches from different loader batches: a per-row field one of them lacks is None."""
    keys = list(dict.fromkeys(key for row in rows for key in row.non_tensors))
    missing = np.array([None], dtype=object)
    filled = [Batch(tensors=row.tensors, non_tensors={key: row.non_tensors.get(key, missing) for key in keys})
              for row in rows]
    return Batch.concat(filled)


def off_policy_metrics(groups: list[GroupRecord], version: int) -> dict[str, float]:
    """Spans and staleness per trajectory, and the partial-rollout counts, for the policy `version` trained now."""
    low = np.array([v for group in groups for v in _result(group).min_versions], dtype=float)
    high = np.array([v for group in groups for v in _result(group).max_versions], dtype=float)
    resumes = np.array([r for group in groups for r in _result(group).num_resumes], dtype=float)
    out = {}
    for name, values in (("trajectory_spans", high - low + 1), ("trajectory_staleness", version - high),
                         ("trajectory_staleness_worst", version - low)):
        out.update({f"training/off_policy/{name}/mean": float(values.mean()),
                    f"training/off_policy/{name}/max": float(values.max()),
                    f"training/off_policy/{name}/min": float(values.min())})
    partial = resumes > 0
    out["fully_async/partial/total_partial_num"] = float(partial.sum())
    out["fully_async/partial/partial_ratio"] = float(partial.mean())
    out["fully_async/partial/max_partial_span"] = float((high - low + 1)[partial].max()) if partial.any() else 0.0
    return out


def eviction_metrics(evicted: list[tuple[GroupRecord, int]]) -> dict[str, float]:
    """`drop`: the groups evicted since the last step (those still running among them) and the versions they
    spanned."""
    out = {"training/off_policy/evicted_samples": float(len(evicted)),
           "training/off_policy/evicted_running_samples": float(sum(g.status == RUNNING for g, _ in evicted))}
    if evicted:
        spans = torch.tensor([float(span) for _, span in evicted])
        out.update({"training/off_policy/evicted_samples_staleness/mean": float(spans.mean()),
                    "training/off_policy/evicted_samples_staleness/max": float(spans.max()),
                    "training/off_policy/evicted_samples_staleness/min": float(spans.min())})
    return out
