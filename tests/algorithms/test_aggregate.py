"""agg_loss modes by hand."""

import pytest
import torch

from hybridrl.algorithms import agg_loss

# rows: (1, 2 | 3 masked), (4 | 5, 6 masked), (7, 8, 9 all masked)
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])


@pytest.mark.parametrize("mode, expected", [
    ("token-mean", 7 / 3),              # (1 + 2 + 4) / 3 tokens
    ("seq-mean-token-sum", 3.5),        # row sums (3, 4), empty row excluded: 7 / 2
    ("seq-mean-token-mean", 2.75),      # row means (1.5, 4): 5.5 / 2
    ("seq-mean-token-sum-norm", 7 / 3),  # 7 / T, T = 3 (padded length)
])
def test_modes_by_hand(mode, expected):
    torch.testing.assert_close(agg_loss(LOSS, MASK, mode), torch.tensor(expected), rtol=1e-6, atol=1e-6)


def test_sum_norm_uses_loss_scale_factor():
    torch.testing.assert_close(agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", loss_scale_factor=7), torch.tensor(1.0))


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_all_masked_gives_zero_not_nan(mode):
    # deliberate deviation from verl HEAD (0/0 = NaN there)
    assert agg_loss(LOSS, torch.zeros_like(MASK), mode).item() == 0.0


def test_unknown_mode_lists_valid_modes():
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
        agg_loss(LOSS, MASK, "token-sum")
