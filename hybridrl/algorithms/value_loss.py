"""Clipped value-function loss for the PPO critic (verl core_algos.compute_value_loss)."""

from __future__ import annotations

import torch

from hybridrl.algorithms.aggregate import agg_loss
from hybridrl.algorithms.masked import masked_mean


def compute_value_loss(vpreds: torch.Tensor, returns: torch.Tensor, values: torch.Tensor,
                       response_mask: torch.Tensor, cliprange_value: float, loss_agg_mode: str = "token-mean"
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """vf_loss = 0.5·agg(max((V̂ − R)², (clip(V̂, V ± ε_v) − R)²)); inputs `(B, T)`, outputs scalars.

    `values` are the rollout-time critic values; vf_clipfrac = fraction of tokens where the clipped term wins.
    """
    vpreds_clipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    vf_losses1 = (vpreds - returns) ** 2
    vf_losses2 = (vpreds_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(torch.max(vf_losses1, vf_losses2), response_mask, loss_agg_mode)
    vf_clipfrac = masked_mean(torch.gt(vf_losses2, vf_losses1).float(), response_mask)
    return vf_loss, vf_clipfrac
