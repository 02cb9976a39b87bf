"""Per-micro-batch metrics of an update, kept on the device until the update ends.

Turning each loss and clip fraction into a float as it is computed waits for the GPU each time (a
dozen times per micro-batch), and the GPU then idles until the host launches the backward pass. Kept
as tensors, every value of the update crosses to the host in one transfer per device at the end.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch


def as_metric(value: torch.Tensor | float) -> torch.Tensor | float:
    """A metric value to store: a one-element tensor detached (no graph kept alive), or a float."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TypeError(f"a metric must be one value, got a tensor of shape {tuple(value.shape)}; reduce it "
                            "first (e.g. .mean())")
        return value.detach().reshape(())
    return float(value)


def means(metrics: Mapping[str, Sequence[torch.Tensor | float]]) -> dict[str, float]:
    """The mean of each key's values (`as_metric` tensors and floats), with one host transfer per device."""
    tensors = [value for values in metrics.values() for value in values if isinstance(value, torch.Tensor)]
    on_host = iter(_to_host(tensors))
    out = {}
    for key, values in metrics.items():
        floats = [next(on_host) if isinstance(value, torch.Tensor) else value for value in values]
        # fsum raises on inf + -inf; a non-finite value (a skipped step's loss) is reported as such
        total = math.fsum(floats) if all(map(math.isfinite, floats)) else sum(floats)
        out[key] = total / len(floats)
    return out


def _to_host(tensors: list[torch.Tensor]) -> list[float]:
    """The tensors' values as floats, in order: stacked per device, then one `.tolist()` per device."""
    by_device: dict[torch.device, list[int]] = {}
    for index, tensor in enumerate(tensors):
        by_device.setdefault(tensor.device, []).append(index)
    values = [0.0] * len(tensors)
    for indices in by_device.values():
        stacked = torch.stack([tensors[i].float() for i in indices]).tolist()
        for i, value in zip(indices, stacked):
            values[i] = value
    return values
