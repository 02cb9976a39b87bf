"""Trajectories -> one training batch with verl's keys (verl `AgentLoopWorker._postprocess`).

Shapes: B trajectories, P = rollout.prompt_length, R = rollout.response_length.
- `prompts` (B, P): left-padded prompt ids; `responses` (B, R): right-padded response ids
  (model tokens and observation tokens);
- `input_ids` (B, P+R) = prompts | responses; `attention_mask` (B, P+R): 1 on real tokens;
- `position_ids` (B, P+R) = clamp(cumsum(attention_mask) - 1, 0);
- `response_mask` (B, R) = the loop's mask x the response attention mask (1 only on sampled tokens);
- `rollout_log_probs` (B, R): the engine's log-probs on sampled tokens, 0.0 elsewhere (absent when no loop
  returned log-probs, as in verl);
- `rm_scores` (B, R), only when every loop scored its trajectory: the score at the last response token.
Non-tensor fields: `__num_turns__` (verl's name), `turn_spans` (the role spans of each response, for the
rollout dump), and every `extra_fields` key of any loop (None on rows without it).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import torch

from hybridrl.rollout.agent.output import AgentLoopOutput
from hybridrl.utils.batch import Batch


def _padded(rows: Sequence[Sequence[float | int]], width: int, value: float | int, dtype: torch.dtype,
            left: bool = False) -> torch.Tensor:
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, row in enumerate(rows):
        if row:
            values = torch.tensor(list(row), dtype=dtype)
            if left:
                out[i, width - len(row):] = values
            else:
                out[i, : len(row)] = values
    return out


def outputs_to_batch(outputs: Sequence[AgentLoopOutput], prompt_length: int, response_length: int,
                     pad_token_id: int) -> Batch:
    """The padded tensors and per-row fields of `outputs` (one row each, in order)."""
    for i, output in enumerate(outputs):
        if len(output.prompt_ids) > prompt_length:
            raise ValueError(f"trajectory {i}: {len(output.prompt_ids)} prompt tokens exceed rollout.prompt_length="
                             f"{prompt_length}")
        output.check(response_length, where=f"trajectory {i}")
    lengths = torch.tensor([len(o.response_ids) for o in outputs], dtype=torch.long)
    prompts = _padded([o.prompt_ids for o in outputs], prompt_length, pad_token_id, torch.long, left=True)
    prompt_attention = _padded([[1] * len(o.prompt_ids) for o in outputs], prompt_length, 0, torch.long, left=True)
    responses = _padded([o.response_ids for o in outputs], response_length, pad_token_id, torch.long)
    response_attention = (torch.arange(response_length) < lengths.unsqueeze(1)).long()
    loop_mask = _padded([o.response_mask for o in outputs], response_length, 0, torch.long)
    attention_mask = torch.cat([prompt_attention, response_attention], dim=1)
    tensors = {
        "prompts": prompts, "responses": responses, "response_mask": loop_mask * response_attention,
        "input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0),
    }
    with_log_probs = [o.response_logprobs is not None for o in outputs]
    if all(with_log_probs):
        tensors["rollout_log_probs"] = _padded([o.response_logprobs for o in outputs], response_length, 0.0, torch.float32)
    elif any(with_log_probs):
        missing = [i for i, present in enumerate(with_log_probs) if not present]
        raise ValueError(f"trajectories {missing[:8]} have no response_logprobs while others do; an agent loop must "
                         f"return the engine's log-probs of its sampled tokens (0.0 on inserted tokens)")
    scores = [o.reward_score for o in outputs]
    if outputs and all(score is not None for score in scores):
        rm_scores = torch.zeros(len(outputs), response_length, dtype=torch.float32)
        rm_scores[torch.arange(len(outputs)), (lengths - 1).clamp(min=0)] = torch.tensor(scores, dtype=torch.float32)
        tensors["rm_scores"] = rm_scores
    return Batch(tensors=tensors, non_tensors=_row_fields(outputs))


def _row_fields(outputs: Sequence[AgentLoopOutput]) -> dict[str, np.ndarray]:
    fields = {
        "__num_turns__": np.array([o.num_turns for o in outputs], dtype=np.int32),
        "turn_spans": object_column([[dataclasses.astuple(span) for span in o.spans] for o in outputs]),
    }
    keys = dict.fromkeys(key for o in outputs for key in o.extra_fields)
    for key in keys:
        fields[key] = object_column([o.extra_fields.get(key) for o in outputs])
    return fields


def object_column(values: list) -> np.ndarray:
    """A numpy object array with one entry per value (lists stay lists, never a second dimension)."""
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):  # element-wise: equal-length lists must not become a 2-D array
        array[i] = value
    return array
