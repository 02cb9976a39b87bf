"""Clipped value loss by hand."""

import torch

from hybridrl.algorithms import compute_value_loss


def test_clipped_value_loss_by_hand():
    # eps 0.5; token 1: clip(1, -0.5, 0.5) = 0.5, (1-2)^2 = 1 < (0.5-2)^2 = 2.25 -> 2.25 (clipped wins)
    # token 2: both 0; token 3: clip(3, 1.5, 2.5) = 2.5, 9 > 6.25 -> 9; token 4 masked
    vpreds = torch.tensor([[1.0, 0.0, 3.0, 7.0]], requires_grad=True)
    returns = torch.tensor([[2.0, 0.0, 0.0, 0.0]])
    values = torch.tensor([[0.0, 0.5, 2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    vf_loss, vf_clipfrac = compute_value_loss(vpreds, returns, values, mask, cliprange_value=0.5)
    torch.testing.assert_close(vf_loss, torch.tensor(0.5 * (2.25 + 0.0 + 9.0) / 3))  # 1.875
    torch.testing.assert_close(vf_clipfrac, torch.tensor(1 / 3))
    vf_loss.backward()
    # token 1 clipped: no gradient; token 3: 0.5 * 2 * (3 - 0) / 3 = 1
    torch.testing.assert_close(vpreds.grad, torch.tensor([[0.0, 0.0, 1.0, 0.0]]))
