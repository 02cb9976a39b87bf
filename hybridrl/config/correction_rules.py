"""Rollout-correction thresholds written as text (`algorithm.rollout_correction.rollout_{is,rs}_threshold`):
verl's 'lower_upper' bounds ('0.5_5.0') and, for rejection sampling, one value per option, comma-separated.
A number goes through the value ranges (config/ranges.py); text is checked here, before any step runs."""

from __future__ import annotations

import math
from typing import Any

KEY = "algorithm.rollout_correction"
FORMS = {"rollout_is_threshold": "a positive number (2.0) or verl's 'lower_upper' bounds ('0.5_5.0')",
         "rollout_rs_threshold": "a positive number, verl's 'lower_upper' bounds ('0.999_1.001'), or one such value "
                                 "per rollout_rs option, comma-separated ('0.999_1.001,2.0')"}


def threshold_text_bounds(text: str) -> list[float] | None:
    """Every number of a threshold text, or None when the text is not one: each comma-separated part is one
    positive number or two ('lower_upper', lower <= upper); inf means no bound."""
    numbers: list[float] = []
    for part in text.split(","):
        try:
            pair = [float(piece) for piece in part.strip().split("_")]
        except ValueError:
            return None
        if len(pair) > 2 or not all(n > 0 and not math.isnan(n) for n in pair) or pair != sorted(pair):
            return None
        numbers += pair
    return numbers


def threshold_text_problems(correction: Any) -> list[str]:
    """One message per threshold key whose text is not a threshold (`correction`: the rollout_correction section)."""
    problems = []
    for name, form in FORMS.items():
        value = getattr(correction, name)
        if isinstance(value, str) and threshold_text_bounds(value) is None:
            problems.append(f"{KEY}.{name}={value!r} is not a threshold: write {form}")
    return problems
