"""Validation metrics with verl's definitions and names (verl/trainer/ppo/metric_utils.py
`process_validation_metrics`, ray_trainer.py `_val_metrics_update`).

For each data source, each numeric variable (`reward` = the summed score, plus every numeric key the reward
function returns, e.g. `acc`) and each prompt (uid) with N samples:
- `mean@N`, and for N > 1 `std@N` (population std over the N samples);
- for k = 2, 4, 8, ... < N and k = N: `best@k/{mean,std}` and `worst@k/{mean,std}`: the mean and std over
  1000 bootstrap resamples (k draws with replacement, seeded) of the max / min of the k values; with a
  `pred` key, `maj@k/{mean,std}`: the value of the first sample of the most voted prediction in each resample.
Each metric is then averaged over the prompts. Keys are `val-core/<source>/<var>/<metric>` for the core
variable (`acc` when the reward returns it, else `reward`) and its mean/best/maj metrics at the largest k,
and `val-aux/...` for the rest. The bootstrap draws are numpy's legacy generator seeded with `seed` for every
(prompt, variable, k), exactly as verl, so a fixed seed gives verl's numbers; they are vectorised here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from numbers import Number
from typing import Any

import numpy as np

NUM_BOOTSTRAP = 1000
CORE_PREFIXES = ("mean", "maj", "best")


def bootstrap_sizes(num_samples: int) -> list[int]:
    """k = 2, 4, 8, ... below N, then N itself; none for N <= 1."""
    if num_samples <= 1:
        return []
    sizes, k = [], 2
    while k < num_samples:
        sizes.append(k)
        k *= 2
    return sizes + [num_samples]


def _bootstrap_indices(num_values: int, subset_size: int, seed: int) -> np.ndarray:
    """(NUM_BOOTSTRAP, k) draws with replacement: what `np.random.seed(seed); np.random.choice(...)` gives
    (verl's bootstrap_metric), without touching numpy's global generator."""
    return np.random.RandomState(seed).choice(num_values, size=(NUM_BOOTSTRAP, subset_size), replace=True)


def _mean_std(results: np.ndarray) -> tuple[float, float]:
    return float(np.mean(results)), float(np.std(results))


def _majority_values(values: np.ndarray, vote_codes: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """verl's calc_maj_val per resample: the most frequent vote (ties: the one seen first in the resample) and
    the value of its first occurrence. `indices (R, k)` → `(R,)`."""
    votes = vote_codes[indices]  # (R, k)
    counts = (votes[:, :, None] == votes[:, None, :]).sum(axis=-1)  # how often each position's vote occurs
    first_winner = np.argmax(counts == counts.max(axis=1, keepdims=True), axis=1)
    return values[indices[np.arange(len(indices)), first_winner]]


def _vote_codes(preds: Sequence[Any]) -> np.ndarray:
    """Integer codes with Python's equality and hashing, as verl's dict of votes (1 == 1.0 == True)."""
    codes: dict[Any, int] = {}
    try:
        return np.array([codes.setdefault(pred, len(codes)) for pred in preds], dtype=np.int64)
    except TypeError as error:
        raise ValueError(f"validation: the reward's `pred` values must be hashable to vote on them ({error})") from error


def _prompt_metrics(values: list[Any], preds: list[Any] | None, seed: int) -> dict[str, float]:
    """The per-prompt metrics of one variable (its N sample values, and their predictions if any)."""
    num = len(values)
    metrics = {f"mean@{num}": float(np.mean(values))}
    if num <= 1:
        return metrics
    metrics[f"std@{num}"] = float(np.std(values))
    as_floats = np.asarray(values, dtype=np.float64)
    codes = _vote_codes(preds) if preds is not None else None
    for k in bootstrap_sizes(num):
        indices = _bootstrap_indices(num, k, seed)
        samples = as_floats[indices]
        metrics[f"best@{k}/mean"], metrics[f"best@{k}/std"] = _mean_std(samples.max(axis=1))
        metrics[f"worst@{k}/mean"], metrics[f"worst@{k}/std"] = _mean_std(samples.min(axis=1))
        if codes is not None:
            metrics[f"maj@{k}/mean"], metrics[f"maj@{k}/std"] = _mean_std(_majority_values(as_floats, codes, indices))
    return metrics


def _is_numeric(values: list[Any]) -> bool:
    return all(isinstance(v, Number | np.number | np.bool_) and not isinstance(v, complex) for v in values)


def process_validation_metrics(data_sources: Sequence[str], sample_uids: Sequence[Any],
                               infos: Mapping[str, Sequence[Any]], seed: int = 42
                               ) -> dict[str, dict[str, dict[str, float]]]:
    """source → variable → metric → value averaged over prompts (verl's function of this name).

    A variable is left out for a data source unless all its values there are numbers (verl skips strings such
    as `pred`; a None, where some rows lacked the key, cannot be averaged either).
    """
    grouped: dict[str, dict[Any, dict[str, list[Any]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for row, (source, uid) in enumerate(zip(data_sources, sample_uids)):
        for name, column in infos.items():
            grouped[source][uid][name].append(column[row])
    numeric = {source: [name for name in infos if _is_numeric([v for prompt in prompts.values() for v in prompt[name]])]
               for source, prompts in grouped.items()}
    per_prompt: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for source, prompts in grouped.items():
        for columns in prompts.values():
            preds = columns.get("pred")
            for name in numeric[source]:
                for metric, value in _prompt_metrics(columns[name], preds, seed).items():
                    per_prompt[source][name][metric].append(value)
    return {source: {name: {metric: float(np.mean(values)) for metric, values in metrics.items()}
                     for name, metrics in variables.items()} for source, variables in per_prompt.items()}


def _largest_k(metric_names: Sequence[str]) -> int:
    return max(int(name.split("@")[-1].split("/")[0]) for name in metric_names)


def validation_metrics(data_sources: Sequence[str], uids: Sequence[Any], scores: Sequence[float],
                       extra: Mapping[str, Sequence[Any]], *, seed: int = 42) -> dict[str, float]:
    """`val-core/...` and `val-aux/...` metrics from one validation pass: per row its data source, prompt uid,
    summed score and the reward function's extra values (`extra[key][row]`). The summed score is the variable
    `reward` (an extra key of that name is shadowed, as in verl)."""
    num_rows = len(scores)
    for name, column in {"data_sources": data_sources, "uids": uids, **extra}.items():
        if len(column) != num_rows:
            raise ValueError(f"validation: {name!r} has {len(column)} entries for {num_rows} scored rows; every "
                             "extra value list must hold one entry per row (None where a row has none)")
    infos = {**extra, "reward": list(scores)}
    metrics: dict[str, float] = {}
    for source, variables in process_validation_metrics(data_sources, uids, infos, seed).items():
        core_var = "acc" if "acc" in variables else "reward"
        for name, values in variables.items():
            largest = _largest_k(list(values))
            for metric, value in values.items():
                core = (name == core_var and metric.startswith(CORE_PREFIXES)
                        and int(metric.split("@")[-1].split("/")[0]) == largest)
                metrics[f"{'val-core' if core else 'val-aux'}/{source}/{name}/{metric}"] = value
    return metrics
