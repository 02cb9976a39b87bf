"""agg_loss modes by hand."""

import pytest
import torch

from hybridrl.algorithms import agg_loss
from hybridrl.algorithms.aggregate import LOSS_AGG_MODES, micro_weight, mini_batch_counts

# rows: (1, 2 | 3 masked), (4 | 5, 6 masked), (7, 8, 9 all masked)
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])


@pytest.mark.parametrize("mode, expected", [
    ("token-mean", 7 / 3),              # (1 + 2 + 4) / 3 tokens
    ("token-sum", 7.0),                 # 1 + 2 + 4
    ("seq-mean-token-sum", 3.5),        # row sums (3, 4), empty row excluded: 7 / 2
    ("seq-mean-token-mean", 2.75),      # row means (1.5, 4): 5.5 / 2
    ("seq-mean-token-sum-norm", 7 / 6),  # verl HEAD: seq-mean-token-sum / T, T = 3 (padded length)
])
def test_modes_by_hand(mode, expected):
    torch.testing.assert_close(agg_loss(LOSS, MASK, mode), torch.tensor(expected), rtol=1e-6, atol=1e-6)


def test_sum_norm_uses_loss_scale_factor():
    torch.testing.assert_close(agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", loss_scale_factor=7), torch.tensor(0.5))


def test_global_counts_and_dp_size_as_verls_engine_passes_them():
    # 2 ranks; this rank's tokens sum to 7 over 3 tokens and 2 sequences; globally 10 tokens, 4 sequences
    torch.testing.assert_close(agg_loss(LOSS, MASK, "token-mean", dp_size=2, batch_num_tokens=10), torch.tensor(1.4))
    torch.testing.assert_close(agg_loss(LOSS, MASK, "token-sum", dp_size=2), torch.tensor(14.0))
    torch.testing.assert_close(agg_loss(LOSS, MASK, "seq-mean-token-sum", dp_size=2, global_batch_size=4),
                               torch.tensor(3.5))
    with pytest.raises(ValueError, match="needs batch_num_tokens, the count over all 2 ranks"):
        agg_loss(LOSS, MASK, "token-mean", dp_size=2)
    with pytest.raises(ValueError, match="needs global_batch_size"):
        agg_loss(LOSS, MASK, "seq-mean-token-mean", dp_size=2)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_all_masked_gives_zero_not_nan(mode):
    # deliberate deviation from verl HEAD (0/0 = NaN there)
    assert agg_loss(LOSS, torch.zeros_like(MASK), mode).item() == 0.0


def test_unknown_mode_lists_valid_modes():
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
        agg_loss(LOSS, MASK, "sum")


def _ragged_losses(rows: int = 12, width: int = 7, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(rows, width, generator=gen, dtype=torch.float64)
    mask = (torch.rand(rows, width, generator=gen) > 0.4).double()
    mask[3] = 0  # a row with no valid token counts for nothing in any mode
    return loss, mask


def _whole_batch_loss(loss: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """The definitions written out over the whole mini-batch."""
    tokens_per_seq, seq_sums = mask.sum(-1), (loss * mask).sum(-1)
    num_seqs = (tokens_per_seq > 0).sum()
    return {"token-mean": seq_sums.sum() / mask.sum(), "token-sum": seq_sums.sum(),
            "seq-mean-token-sum": seq_sums.sum() / num_seqs,
            "seq-mean-token-mean": (seq_sums / (tokens_per_seq + 1e-8)).sum() / num_seqs,
            "seq-mean-token-sum-norm": seq_sums.sum() / num_seqs / loss.shape[-1]}[mode]


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_weighted_micro_batches_add_up_to_the_whole_mini_batch_on_any_split_and_rank_count(mode):
    """loss_agg_scope=mini_batch: micro-batch i contributes agg_loss(i) x micro_weight(i); over ranks, the
    gradient average divides by the rank count, which the weight's x ranks undoes."""
    loss, mask = _ragged_losses()
    counts = mini_batch_counts(mask)
    want = _whole_batch_loss(loss, mask, mode)
    for ranks, splits in ((1, [(0, 5), (5, 6), (6, 12)]), (1, [(0, 12)]), (2, [(0, 2), (2, 4), (4, 12)])):
        parts = [agg_loss(loss[a:b], mask[a:b], mode) * micro_weight(mode, mask[a:b], counts, ranks)
                 for a, b in splits]
        torch.testing.assert_close(sum(parts).double() / ranks, want.double(), rtol=1e-6, atol=0)


def test_micro_weight_of_an_all_masked_mini_batch_is_finite():
    mask = torch.zeros(3, 4)
    assert micro_weight("token-mean", mask, mini_batch_counts(mask)).item() == 0.0
