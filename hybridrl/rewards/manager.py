"""Scoring decoded responses row by row (verl's naive reward manager) and placing scores on tokens.

A reward function returns a float or a dict with "score" (other keys are per-row extra info). A
function that raises stops training unless `reward_model.on_error=zero`, which scores the row 0 and
counts it (`reward/num_errors`); a result that is not a finite number always stops it.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

ON_ERROR_MODES = ("raise", "zero")


class RewardFunctionError(RuntimeError):
    """A reward function raised, or returned something that is not a finite score."""


@dataclass
class ScoredBatch:
    """Per-row scores, extra info aligned to rows (None where a row had none), and how many rows errored.

    `metrics`: a reward manager's own (e.g. DAPO's overlong share). `token_level_scores`: (B, R) scores a
    manager placed itself (a verl reward-manager class returns them); None = place `scores` at each row's
    last response token."""
    scores: list[float]
    extra: dict[str, list] = field(default_factory=dict)
    num_errors: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    token_level_scores: torch.Tensor | None = None


def function_name(fn: Callable) -> str:
    """`module:qualname` of `fn`, looking through functools.partial."""
    # A bare partial has no __qualname__ (a wrapped one, as load_custom_reward_fn returns, does).
    target = fn.func if isinstance(fn, functools.partial) and not hasattr(fn, "__qualname__") else fn
    module = getattr(target, "__module__", None) or "?"
    return f"{module}:{getattr(target, '__qualname__', repr(target))}"


def score_batch(responses_text: list[str], data_sources: Sequence[str], ground_truths: Sequence[Any],
                extra_infos: Sequence[dict | None], compute_score: Callable, on_error: str = "raise",
                first_row: int = 0) -> ScoredBatch:
    """Call `compute_score(data_source, solution_str, ground_truth, extra_info)` for every row.

    `first_row`: the batch row of the first response here (a chunk scored elsewhere), for error messages."""
    if on_error not in ON_ERROR_MODES:
        raise ValueError(f"reward_model.on_error={on_error!r} is not one of {ON_ERROR_MODES}")
    sizes = {len(responses_text), len(data_sources), len(ground_truths), len(extra_infos)}
    if len(sizes) != 1:
        raise ValueError(f"score_batch got lists of different lengths: responses {len(responses_text)}, data_sources "
                         f"{len(data_sources)}, ground_truths {len(ground_truths)}, extra_infos {len(extra_infos)}")
    scored = ScoredBatch(scores=[])
    row_extras: list[dict[str, Any]] = []
    for index, response in enumerate(responses_text):
        call = (data_sources[index], response, ground_truths[index], extra_infos[index])
        row = first_row + index
        try:
            result = compute_score(*call)
        except Exception as error:
            if on_error == "raise":
                raise RewardFunctionError(describe_error(compute_score, data_sources[index], row, error)) from error
            scored.num_errors += 1
            result = 0.0
        score, extra = split_result(result, compute_score, data_sources[index], row)
        scored.scores.append(score)
        row_extras.append(extra)
    scored.extra = rows_extra(row_extras)
    return scored


def describe_error(fn: Callable, data_source: str, index: int, error: BaseException) -> str:
    """The message of a reward function that raised on row `index`, with the two ways out."""
    return _describe(fn, data_source, index) + (
        f" raised {type(error).__name__}: {error}. Fix the function, or set reward_model.on_error=zero "
        f"to score such rows 0 (counted in reward/num_errors)")


def rows_extra(row_extras: Sequence[dict[str, Any]]) -> dict[str, list]:
    """Per-row extra dicts as one dict of row-aligned lists (None where a row lacks a key)."""
    keys = dict.fromkeys(key for extra in row_extras for key in extra)
    return {key: [extra.get(key) for extra in row_extras] for key in keys}


def concat_scored(parts: Sequence[ScoredBatch]) -> ScoredBatch:
    """Consecutive chunks' results as one batch's: a key some chunk lacks is None on that chunk's rows."""
    keys = dict.fromkeys(key for part in parts for key in part.extra)
    return ScoredBatch(scores=[score for part in parts for score in part.scores],
                       extra={key: [value for part in parts
                                    for value in part.extra.get(key, [None] * len(part.scores))] for key in keys},
                       num_errors=sum(part.num_errors for part in parts))


def _describe(fn: Callable, data_source: str, index: int) -> str:
    return f"reward function {function_name(fn)} on sample {index} (data_source={data_source!r})"


def split_result(result: Any, fn: Callable, data_source: str, index: int) -> tuple[float, dict[str, Any]]:
    """(score, extra info) from a float or a {"score": ..., **extra} dict; anything else is an error."""
    extra: dict[str, Any] = {}
    if isinstance(result, dict):
        if "score" not in result:
            raise RewardFunctionError(_describe(fn, data_source, index) + f" returned a dict without 'score' "
                                      f"(keys: {sorted(result)}); return a float or a dict with a 'score' key")
        extra = {key: value for key, value in result.items() if key != "score"}
        result = result["score"]
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        result = result.item()
    if not isinstance(result, numbers.Real):
        raise RewardFunctionError(_describe(fn, data_source, index) + f" returned {type(result).__name__} "
                                  f"{str(result)[:100]!r}; it must return a number or a dict with a numeric 'score'")
    if not math.isfinite(float(result)):
        raise RewardFunctionError(_describe(fn, data_source, index) + f" returned {result}; scores must be finite")
    return float(result), extra


def place_scores(scores: Sequence[float], response_lengths: Sequence[int] | torch.Tensor,
                 response_len: int) -> torch.Tensor:
    """(B, R) float32 zeros with row i's score at its last valid response token, index len_i - 1 (verl).

    A zero-length response has no token to carry the score; it is put at index 0 (masked out by
    response_mask downstream, so such a row contributes no reward signal).
    """
    lengths = torch.as_tensor(response_lengths, dtype=torch.long).reshape(-1)
    if lengths.numel() != len(scores):
        raise ValueError(f"place_scores got {len(scores)} scores but {lengths.numel()} response lengths")
    if lengths.numel() and (lengths.max() > response_len or lengths.min() < 0):
        raise ValueError(f"response lengths must lie in 0..{response_len} (response_length); got "
                         f"{lengths.min().item()}..{lengths.max().item()}")
    token_scores = torch.zeros(len(scores), response_len, dtype=torch.float32)
    rows = torch.arange(len(scores))
    token_scores[rows, (lengths - 1).clamp(min=0)] = torch.tensor(list(scores), dtype=torch.float32)
    return token_scores
