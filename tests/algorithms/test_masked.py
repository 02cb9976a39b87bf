"""Masked statistics by hand."""

import pytest
import torch

from hybridrl.algorithms import masked_mean, masked_var, masked_whiten

VALUES = torch.tensor([[1.0, 3.0, float("nan")], [5.0, float("inf"), 0.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_mean_and_unbiased_var_ignore_padding():
    # valid 1, 3, 5: mean 3; unbiased var = (4 + 0 + 4) / 2 = 4
    torch.testing.assert_close(masked_mean(VALUES, MASK), torch.tensor(3.0))
    torch.testing.assert_close(masked_var(VALUES, MASK), torch.tensor(4.0))
    torch.testing.assert_close(masked_var(VALUES, MASK, unbiased=False), torch.tensor(8 / 3))
    torch.testing.assert_close(masked_mean(VALUES, MASK, axis=-1), torch.tensor([2.0, 5.0]))


def test_whiten_by_hand():
    # (x - 3) / sqrt(4 + 1e-8): -1, 0, 1
    whitened = masked_whiten(VALUES, MASK)
    torch.testing.assert_close(whitened[MASK.bool()], torch.tensor([-1.0, 0.0, 1.0]))
    torch.testing.assert_close(masked_whiten(VALUES, MASK, shift_mean=False)[MASK.bool()], torch.tensor([2.0, 3.0, 4.0]))


def test_var_needs_two_elements():
    with pytest.raises(ValueError, match="no element"):
        masked_var(VALUES, torch.zeros_like(MASK))
    with pytest.raises(ValueError, match="single element"):
        masked_var(VALUES, torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
