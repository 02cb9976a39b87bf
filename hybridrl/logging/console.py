"""verl's console line, `step:N - key:value - ...`, with keys grouped policy → value → reward → system → rest."""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

# Groups in print order; within a group a key sorts by its most specific (longest) matching pattern,
# then alphabetically. Patterns ending in "/" or "_" are prefixes, others exact names.
_GROUPS: tuple[tuple[str, ...], ...] = (
    ("actor/",),  # policy health
    ("critic/vf_", "critic/vpred_mean", "critic/values/", "critic/vf_explained_var", "critic/grad_norm",
     "critic/lr", "critic/advantages/", "critic/returns/"),  # value quality
    ("critic/score/", "critic/rewards/", "val-core/", "val-aux/", "response_length/",
     "response_length_non_aborted/", "response/", "prompt_length/", "reward/"),  # task reward
    ("training/", "timing_s/", "timing_per_token_ms/", "perf/"),  # system performance
)
_PATTERNS: list[tuple[str, int, int]] = [
    (pattern, group, index) for group, patterns in enumerate(_GROUPS) for index, pattern in enumerate(patterns)
]


def _matches(key: str, pattern: str) -> bool:
    return key.startswith(pattern) if pattern.endswith(("/", "_")) else key == pattern


def _sort_key(key: str) -> tuple[int, int, str]:
    best: tuple[str, int, int] | None = None
    for pattern, group, index in _PATTERNS:
        if _matches(key, pattern) and (best is None or len(pattern) > len(best[0])):
            best = (pattern, group, index)
    if best is None:
        return (len(_GROUPS), 0, key)  # everything else, alphabetically, at the end
    return (best[1], best[2], key)


def order_metrics(metrics: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The (key, value) pairs in console order: actor → critic/value → score/reward/lengths → timing/perf → rest."""
    return [(key, metrics[key]) for key in sorted(metrics, key=_sort_key)]


def format_value(value: Any) -> str:
    """Ints as ints, floats with 6 significant digits (`nan`/`inf` spelled out), anything else via str()."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        return str(value) if not math.isfinite(value) else format(value, ".6g")
    return str(value)


def format_console_line(step: int, metrics: Mapping[str, Any]) -> str:
    """`step:N - key:value - key:value ...` (verl's aggregate_logger format, keys in `order_metrics` order)."""
    parts = [f"step:{step}"] + [f"{key}:{format_value(value)}" for key, value in order_metrics(metrics)]
    return " - ".join(parts)


class ConsoleTracker:
    """Prints one `step:` line per logged step to stdout (grep-able like verl's check_results.py expects)."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        print(format_console_line(step, metrics), flush=True)

    def finish(self) -> None:
        pass  # stdout needs no closing
