"""The console's step line: a compact, grouped line a person can read (policy health → value → reward →
validation → system, ~10 metrics with units); every metric still goes to the JSONL file and the trackers.

`HYBRIDRL_CONSOLE=verl` prints verl's full line instead (`step:N - key:value - ...`, every key, grouped in the same
order), for log parsers written against verl's console output.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from hybridrl.logging.terminal import write_line

CONSOLE_STYLE_ENV = "HYBRIDRL_CONSOLE"

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


def _number(fmt: str, unit: str = "") -> Callable[[float], str]:
    return lambda value: format(value, fmt) + unit


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def _rate(value: float) -> str:
    """Tokens per second, short: 860 tok/s, 12.4k tok/s, 1.25M tok/s."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix} tok/s"
    return f"{value:.0f} tok/s"


@dataclass(frozen=True)
class Field:
    """One value on the step line: its label, the metric keys it may come from (first present wins), its format."""

    label: str
    keys: tuple[str, ...]
    show: Callable[[float], str]


# The step line's groups in print order. Keys are verl's metric names (trainer/metrics.py, workers/).
STEP_LINE_GROUPS: tuple[tuple[str, tuple[Field, ...]], ...] = (
    ("policy", (Field("pg_loss", ("actor/pg_loss",), _number(".4g")),
                Field("kl_ref", ("actor/kl_loss",), _number(".3g")),  # to the reference (use_kl_loss)
                Field("ppo_kl", ("actor/ppo_kl",), _number(".3g")),  # old policy → updated policy
                Field("entropy", ("actor/entropy",), _number(".3f")),
                Field("clip", ("actor/pg_clipfrac",), _percent),
                Field("grad", ("actor/grad_norm",), _number(".3g")))),
    ("value", (Field("vf_loss", ("critic/vf_loss",), _number(".4g")),
               Field("expl_var", ("critic/vf_explained_var",), _number(".3f")))),
    ("reward", (Field("score", ("critic/score/mean",), _number(".3f")),
                Field("len", ("response_length/mean",), _number(".0f", " tok")),
                Field("len_clip", ("response_length/clip_ratio",), _percent))),
    ("system", (Field("step", ("timing_s/step",), _number(".2f", " s")),
                Field("gen", ("timing_s/gen",), _number(".2f", " s")),
                Field("", ("perf/throughput",), _rate),
                Field("mem", ("perf/max_memory_allocated_gb",), _number(".1f", " GB")))),
)


def _field_text(field: Field, metrics: Mapping[str, Any]) -> str | None:
    for key in field.keys:
        value = metrics.get(key)
        if isinstance(value, numbers.Real):
            shown = field.show(float(value)) if math.isfinite(value) else str(float(value))
            return f"{field.label} {shown}" if field.label else shown
    return None


def _validation_text(metrics: Mapping[str, Any]) -> str | None:
    """`val-core/<source>/<var>/mean@N` keys as `<source> <var>@N 0.845` (validation steps only)."""
    parts = []
    for key in sorted(k for k in metrics if k.startswith("val-core/") and "/mean@" in k):
        source_var, _, metric = key.removeprefix("val-core/").rpartition("/")
        source, _, var = source_var.rpartition("/")
        parts.append(f"{source} {var}@{metric.removeprefix('mean@')} {format_value(metrics[key])}")
    return "val " + "  ".join(parts) if parts else None


def format_step_line(step: int, metrics: Mapping[str, Any]) -> str:
    """`step:N | policy pg_loss .. kl .. | value .. | reward score .. len .. tok | val .. | system 1.23 s ..`;
    a group none of whose metrics were logged this step is left out."""
    parts = [f"step:{step}"]
    for group, fields in STEP_LINE_GROUPS:
        texts = [text for text in (_field_text(field, metrics) for field in fields) if text is not None]
        if texts:
            parts.append(f"{group} " + "  ".join(texts))
        if group == "reward":
            validation = _validation_text(metrics)
            if validation is not None:
                parts.append(validation)
    return " | ".join(parts)


def console_style() -> str:
    style = os.environ.get(CONSOLE_STYLE_ENV, "compact").strip().lower() or "compact"
    if style not in ("compact", "verl"):
        raise ValueError(f"{CONSOLE_STYLE_ENV}={style!r}: use compact (the default) or verl (every key, verl's line)")
    return style


class ConsoleTracker:
    """One line per logged step on stdout: compact by default, verl's full line with HYBRIDRL_CONSOLE=verl."""

    def __init__(self) -> None:
        self.style = console_style()

    def log(self, metrics: dict[str, float], step: int) -> None:
        line = format_console_line(step, metrics) if self.style == "verl" else format_step_line(step, metrics)
        write_line(line)

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        from hybridrl.logging.val_generations import format_generations

        write_line(format_generations(samples, step))

    def finish(self) -> None:
        pass  # stdout needs no closing
