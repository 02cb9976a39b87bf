"""Scoring decoded responses row by row (verl's naive reward manager) and placing scores on tokens.

A reward function returns a float or a dict with "score" (other keys are per-row extra info). A
function that raises stops training unless `reward_model.on_error=zero`, which scores the row 0 and
counts it (`reward/num_errors`); a call past `reward_model.reward_fn_timeout_s` does the same, counted in
`reward/num_timeouts` (rewards/watchdog.py). A result that is not a finite float32 number, and a
function that calls `sys.exit`, always stop it.
"""

from __future__ import annotations

import functools
import math
import numbers
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from hybridrl.rewards.watchdog import (PROGRESS_EVERY_S, TIMEOUT_KEY, CallWatchdog, RewardCallTimeout, RowInFlight,
                                       ScoringClock)

if TYPE_CHECKING:
    import torch

ON_ERROR_MODES = ("raise", "zero")
FLOAT32_MAX = float.fromhex("0x1.fffffep+127")  # torch.finfo(torch.float32).max: token_level_scores are float32


class RewardFunctionError(RuntimeError):
    """A reward function raised, ran past its deadline, or returned something that is not a finite score."""


@dataclass
class ScoredBatch:
    """Per-row scores, extra info aligned to rows (None where a row had none), and how many rows errored or
    ran past the per-call deadline (both scored 0 under on_error=zero).

    `metrics`: a reward manager's own (e.g. DAPO's overlong share). `token_level_scores`: (B, R) scores a
    manager placed itself (a verl reward-manager class returns them); None = place `scores` at each row's
    last response token."""
    scores: list[float]
    extra: dict[str, list] = field(default_factory=dict)
    num_errors: int = 0
    num_timeouts: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    token_level_scores: torch.Tensor | None = None


@dataclass
class RowOutcome:
    """One row's result: its score, its extra info, and whether it scored 0 for an error or a timeout."""
    score: float
    extra: dict[str, Any]
    errored: bool = False
    timed_out: bool = False


def function_name(fn: Callable) -> str:
    """`module:qualname` of `fn`, looking through functools.partial."""
    # A bare partial has no __qualname__ (a wrapped one, as load_custom_reward_fn returns, does).
    target = fn.func if isinstance(fn, functools.partial) and not hasattr(fn, "__qualname__") else fn
    module = getattr(target, "__module__", None) or "?"
    return f"{module}:{getattr(target, '__qualname__', repr(target))}"


def score_batch(responses_text: list[str], data_sources: Sequence[str], ground_truths: Sequence[Any],
                extra_infos: Sequence[dict | None], compute_score: Callable, on_error: str = "raise",
                first_row: int = 0, timeout_s: float | None = None,
                on_stuck: Callable[[RowInFlight], None] | None = None,
                progress_every_s: float = PROGRESS_EVERY_S, on_timeout: str | None = None) -> ScoredBatch:
    """Call `compute_score(data_source, solution_str, ground_truth, extra_info)` for every row.

    `first_row`: the batch row of the first response here (a chunk scored elsewhere), for error messages.
    `timeout_s`: the most one call may take (None: no limit); a call past it follows `on_timeout` (None: as
    `on_error`; "zero" is verl's naive `compute_score_timeout`). `on_stuck`: told when a call on a thread other
    than the main one ran past its deadline and could not be interrupted (rewards/watchdog.py)."""
    check_rows(on_error, responses_text, data_sources, ground_truths, extra_infos)
    check_rows(on_timeout or on_error)
    clock = ScoringClock(len(responses_text), progress_every_s, timeout_s)
    outcomes = []
    with CallWatchdog(clock, on_stuck) as watchdog:
        for index, response in enumerate(responses_text):
            call = (data_sources[index], response, ground_truths[index], extra_infos[index])
            outcomes.append(score_row(compute_score, first_row + index, call, on_error, timeout_s, watchdog,
                                      on_timeout))
    return collect(outcomes)


def check_rows(on_error: str, *columns: Sequence) -> None:
    if on_error not in ON_ERROR_MODES:
        raise ValueError(f"reward_model.on_error={on_error!r} is not one of {ON_ERROR_MODES}")
    if len({len(column) for column in columns}) > 1:
        raise ValueError("score_batch got lists of different lengths: responses, data_sources, ground_truths, "
                         f"extra_infos = {[len(column) for column in columns]}")


def score_row(fn: Callable, row: int, call: tuple, on_error: str, timeout_s: float | None = None,
              watchdog: CallWatchdog | None = None, on_timeout: str | None = None) -> RowOutcome:
    """`fn(*call)` for batch row `row`, under `watchdog`'s deadline when given, with the error rules above."""
    data_source = call[0]
    try:
        result = watchdog.call(row, data_source, fn, call) if watchdog is not None else fn(*call)
    except RewardCallTimeout as timeout:
        return timeout_outcome(function_name(fn), row, data_source, timeout_s, on_timeout or on_error, timeout)
    except (SystemExit, Exception) as error:
        return failed_call_outcome(error, fn, data_source, row, on_error)
    score, extra = split_result(result, fn, data_source, row)
    return RowOutcome(score, extra)


def failed_call_outcome(error: BaseException, fn: Callable, data_source: str, row: int, on_error: str) -> RowOutcome:
    """A reward call that raised: a zero score counted as an error, or a RewardFunctionError (`on_error=raise`, and
    always for SystemExit: a function that ends the process is a bug whatever on_error says)."""
    if isinstance(error, SystemExit):
        raise RewardFunctionError(describe(fn, data_source, row) + (
            f" called sys.exit({error.code!r}) (SystemExit); a reward function must return a score. Remove the "
            "exit, or return 0.0 where it gives up")) from error
    if on_error == "raise":
        raise RewardFunctionError(describe_error(fn, data_source, row, error)) from error
    return RowOutcome(0.0, {}, errored=True)


def timeout_outcome(fn_name: str, row: int, data_source: str, timeout_s: float | None, on_error: str,
                    cause: BaseException | None = None) -> RowOutcome:
    """A row whose call ran past `timeout_s`: scored 0 under on_error=zero, else a RewardFunctionError."""
    if on_error == "zero":
        return RowOutcome(0.0, {}, timed_out=True)
    raise RewardFunctionError(
        f"reward function {fn_name} on sample {row} (data_source={data_source!r}) did not return within "
        f"{TIMEOUT_KEY}={timeout_s:g} s and was stopped. Fix the function (it may loop or wait forever on some "
        f"inputs), raise {TIMEOUT_KEY}, or set reward_model.on_error=zero to score such rows 0 (counted in "
        "reward/num_timeouts)") from cause


def collect(outcomes: Sequence[RowOutcome]) -> ScoredBatch:
    """Row outcomes (in row order) as one ScoredBatch; a key some rows lack is None on those rows."""
    return ScoredBatch(scores=[outcome.score for outcome in outcomes],
                       extra=rows_extra([outcome.extra for outcome in outcomes]),
                       num_errors=sum(outcome.errored for outcome in outcomes),
                       num_timeouts=sum(outcome.timed_out for outcome in outcomes))


def describe_error(fn: Callable, data_source: str, index: int, error: BaseException) -> str:
    """The message of a reward function that raised on row `index`, with the two ways out."""
    return describe(fn, data_source, index) + (
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
                       num_errors=sum(part.num_errors for part in parts),
                       num_timeouts=sum(part.num_timeouts for part in parts))


def describe(fn: Callable | str, data_source: str, index: int) -> str:
    name = fn if isinstance(fn, str) else function_name(fn)
    return f"reward function {name} on sample {index} (data_source={data_source!r})"


def split_result(result: Any, fn: Callable | str, data_source: str, index: int) -> tuple[float, dict[str, Any]]:
    """(score, extra info) from a float or a {"score": ..., **extra} dict; anything else is an error."""
    extra: dict[str, Any] = {}
    if isinstance(result, dict):
        if "score" not in result:
            raise RewardFunctionError(describe(fn, data_source, index) + f" returned a dict without 'score' "
                                      f"(keys: {sorted(result)}); return a float or a dict with a 'score' key")
        extra = {key: value for key, value in result.items() if key != "score"}
        result = result["score"]
    torch_module = sys.modules.get("torch")  # a tensor result means torch is loaded; scoring workers need not load it
    if torch_module is not None and isinstance(result, torch_module.Tensor) and result.numel() == 1:
        result = result.item()
    if not isinstance(result, numbers.Real):
        raise RewardFunctionError(describe(fn, data_source, index) + f" returned {type(result).__name__} "
                                  f"{str(result)[:100]!r}; it must return a number or a dict with a numeric 'score'")
    value = float(result)
    if not math.isfinite(value):
        raise RewardFunctionError(describe(fn, data_source, index) + f" returned {result}; scores must be finite")
    if abs(value) > FLOAT32_MAX:
        raise RewardFunctionError(describe(fn, data_source, index) + (
            f" returned {value:g}, which is inf in float32 (token_level_scores are float32, |score| <= "
            f"{FLOAT32_MAX:.3g}); scores must be finite"))
    return value, extra


def place_scores(scores: Sequence[float], response_lengths: Sequence[int] | torch.Tensor,
                 response_len: int) -> torch.Tensor:
    """(B, R) float32 zeros with row i's score at its last valid response token, index len_i - 1 (verl).

    A zero-length response has no token to carry the score; it is put at index 0 (masked out by
    response_mask downstream, so such a row contributes no reward signal).
    """
    import torch

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


def ground_truths(reward_infos: Sequence[Any], data_sources: Sequence[str],
                  needs_ground_truth: bool) -> tuple[list[Any], list[int]]:
    """Each row's `reward_model.ground_truth`, and the rows that have none (no dict, no key, or null).

    With `needs_ground_truth` (the built-in scorers compare against it) such rows are an error naming them:
    they would all score 0 however good the response. A custom function may not need it; the caller warns."""
    truths = [info.get("ground_truth") if isinstance(info, dict) else None for info in reward_infos]
    missing = [row for row, truth in enumerate(truths) if truth is None]
    if missing and needs_ground_truth:
        shown = ", ".join(f"{row} (data_source={data_sources[row]!r})" for row in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise RewardFunctionError(
            f"{len(missing)} of {len(truths)} rows have no reward_model.ground_truth: rows {shown}{more}. The built-in "
            "scorer compares each response with it, so these rows would score 0 whatever the response. Give every "
            "row reward_model={'style': 'rule', 'ground_truth': ...} in the data (hybridrl preprocess gsm8k|math "
            "writes it), or score with custom_reward_function.path=<file> whose function does not need it")
    return truths, missing
