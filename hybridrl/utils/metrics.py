"""Metric helpers shared by workers and the trainer: scalar conversion, verl's by-name reduction, phase timers."""

from __future__ import annotations

import math
import numbers
import time
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence


def to_float(x: Any) -> float:
    """A one-element torch tensor, numpy scalar/array or Python number as a plain float."""
    if isinstance(x, bool):
        return float(x)
    if isinstance(x, numbers.Real):
        return float(x)
    if hasattr(x, "numel") and hasattr(x, "item"):  # torch.Tensor, checked by duck type to keep torch unimported
        if x.numel() != 1:
            raise TypeError(f"to_float needs a one-element tensor, got shape {tuple(x.shape)}; reduce it first (e.g. .mean())")
        return float(x.detach().float().item() if hasattr(x, "detach") else x.item())
    if hasattr(x, "size") and hasattr(x, "item"):  # numpy scalar or array
        if x.size != 1:
            raise TypeError(f"to_float needs a one-element array, got shape {getattr(x, 'shape', ())}; reduce it first")
        return float(x.item())
    raise TypeError(f"to_float cannot convert {type(x).__name__} ({x!r}) to a float")


def _reduce_one(key: str, values: Sequence[float]) -> float:
    # verl/utils/metric/utils.py: the key's name picks the reduction, "max" checked before "min"
    if "max" in key:
        return max(values)
    if "min" in key:
        return min(values)
    return math.fsum(values) / len(values)


def reduce_metrics(metrics: Mapping[str, Sequence[Any] | Any]) -> dict[str, float]:
    """Reduce per-micro-batch metric lists to one float each: key contains "max" → max, "min" → min, else mean.

    A scalar value (not a list) is passed through as a float.
    """
    reduced: dict[str, float] = {}
    for key, values in metrics.items():
        if isinstance(values, (list, tuple)):
            if not values:
                raise ValueError(f"metric {key!r} has no values to reduce; append at least one value or drop the key")
            reduced[key] = _reduce_one(key, [to_float(v) for v in values])
        else:
            reduced[key] = to_float(values)
    return reduced


@contextmanager
def timed(name: str, timings: dict[str, float]) -> Iterator[None]:
    """Add the block's wall-clock seconds to `timings[name]` (summed when the name repeats in one step)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + (time.perf_counter() - start)
