"""Validation metrics with verl's names: `val-core/<data_source>/<var>/mean@N`, `best@N/mean`, `maj@N/mean`.

Deviation from verl (documented): best@N and maj@N are computed exactly over the N samples of each
prompt instead of verl's bootstrap estimate (1000 resamples); for N samples both agree in expectation.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np


def _group_by_prompt(uids: list, values: list) -> list[list]:
    groups: dict = defaultdict(list)
    for uid, value in zip(uids, values):
        groups[uid].append(value)
    return list(groups.values())


def _majority_score(preds: list, scores: list[float]) -> float:
    """Score of the most common prediction (ties: first seen), verl's maj@N."""
    winner = Counter(preds).most_common(1)[0][0]
    return float(np.mean([s for p, s in zip(preds, scores) if p == winner]))


def _source_metrics(source: str, var: str, n: int, uids: list, scores: list[float],
                    preds: list | None) -> dict[str, float]:
    core, aux = f"val-core/{source}/{var}", f"val-aux/{source}/{var}"
    metrics = {f"{core}/mean@{n}": float(np.mean(scores))}
    if n > 1:
        groups = _group_by_prompt(uids, scores)
        metrics[f"{core}/best@{n}/mean"] = float(np.mean([max(g) for g in groups]))
        metrics[f"{aux}/worst@{n}/mean"] = float(np.mean([min(g) for g in groups]))
        metrics[f"{aux}/std@{n}"] = float(np.mean([np.std(g) for g in groups]))
        if preds is not None:
            pred_groups = _group_by_prompt(uids, preds)
            metrics[f"{core}/maj@{n}/mean"] = float(np.mean(
                [_majority_score(p, s) for p, s in zip(pred_groups, groups)]))
    return metrics


def validation_metrics(data_sources: list[str], uids: list, scores: list[float], extra: dict[str, list],
                       n: int) -> dict[str, float]:
    """Metrics per data source; the core variable is `acc` when the reward returns it, else `reward`."""
    var = "acc" if "acc" in extra and all(v is not None for v in extra["acc"]) else "reward"
    values = [float(v) for v in extra["acc"]] if var == "acc" else list(scores)
    preds = extra.get("pred")
    metrics: dict[str, float] = {}
    for source in sorted(set(data_sources)):
        rows = [i for i, s in enumerate(data_sources) if s == source]
        source_preds = [preds[i] for i in rows] if preds is not None else None
        metrics.update(_source_metrics(source, var, n, [uids[i] for i in rows], [values[i] for i in rows],
                                       source_preds))
    return metrics
