"""Masked reductions over `(B, T)` tensors with verl's numerics (verl/utils/torch_functional.py).

`mask` is 1 on valid tokens and 0 on padding; it may be bool, int or float.
"""

from __future__ import annotations

import torch

MEAN_EPSILON = 1e-8  # masked_mean denominator: sum(mask) + 1e-8
WHITEN_EPSILON = 1e-8  # masked_whiten: rsqrt(var + 1e-8)


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Σ values·mask; padding entries are zeroed first so NaN/inf there cannot leak in."""
    valid_values = torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))
    return (valid_values * mask).sum() if axis is None else (valid_values * mask).sum(dim=axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Σ values·mask / (Σ mask + 1e-8); an all-masked row gives 0, not NaN."""
    mask_sum = mask.sum() if axis is None else mask.sum(dim=axis)
    return masked_sum(values, mask, axis) / (mask_sum + MEAN_EPSILON)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over all masked entries; unbiased multiplies by N/(N-1) (Bessel), which needs N >= 2."""
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        num_valid = mask.sum()
        if num_valid == 0:
            raise ValueError("masked_var: the mask selects no element; at least two valid tokens are needed")
        if num_valid == 1:
            raise ValueError(
                "masked_var: the mask selects a single element, so the unbiased variance (N-1 = 0) is undefined; "
                "use a batch with at least two valid response tokens"
            )
        variance = variance * (num_valid / (num_valid - 1))
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(values − μ)·rsqrt(σ² + 1e-8) with μ, σ² (unbiased) over every masked entry of the whole batch."""
    mean = masked_mean(values, mask)
    whitened = (values - mean) * torch.rsqrt(masked_var(values, mask) + WHITEN_EPSILON)
    return whitened if shift_mean else whitened + mean
