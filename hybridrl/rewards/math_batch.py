"""verl's `math_batch` example of a batched reward function (for `reward_manager.name=batch`): MATH's
scorer over lists of rows."""

from __future__ import annotations

from typing import Any, Sequence

from hybridrl.rewards.math import compute_score


def compute_score_batched(data_sources: Sequence[str], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                          extra_infos: Sequence[Any]) -> list[float]:
    if len(solution_strs) != len(ground_truths):
        raise ValueError(f"{len(solution_strs)} solutions but {len(ground_truths)} ground truths")
    return [compute_score(solution, truth) for solution, truth in zip(solution_strs, ground_truths)]
