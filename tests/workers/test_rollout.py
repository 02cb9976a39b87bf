"""The rollout role's batch assembly: prompts repeated n times beside right-padded responses and log-probs."""

import pytest
import torch

from hybridrl.utils.batch import Batch
from hybridrl.workers.rollout import assemble, unpadded_rows


def _prompts() -> Batch:
    ids = torch.tensor([[0, 5, 6], [7, 8, 9]])  # left-padded (pad 0)
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    return Batch({"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)})


def test_responses_and_log_probs_are_right_padded_after_interleaved_prompts():
    tokens = [[11, 12, 13], [14], [15, 16], []]  # prompt 0 twice, then prompt 1 twice (n=2)
    log_probs = [[-0.5, -0.25, -1.0], [-2.0], [-0.125, -3.0], []]
    batch = assemble(_prompts(), tokens, log_probs, n=2, response_length=4, pad_token_id=0)
    assert batch["prompts"].tolist() == [[0, 5, 6], [0, 5, 6], [7, 8, 9], [7, 8, 9]]
    assert batch["responses"].tolist() == [[11, 12, 13, 0], [14, 0, 0, 0], [15, 16, 0, 0], [0, 0, 0, 0]]
    assert batch["response_mask"].tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    assert batch["rollout_log_probs"].dtype == torch.float32
    assert batch["rollout_log_probs"].tolist() == [[-0.5, -0.25, -1.0, 0.0], [-2.0, 0.0, 0.0, 0.0],
                                                   [-0.125, -3.0, 0.0, 0.0], [0.0] * 4]
    assert batch["input_ids"].shape == (4, 7) and batch["responses"].dtype == torch.long
    assert batch["position_ids"][0].tolist() == [0, 0, 1, 2, 3, 4, 5]  # responses continue the prompt's positions


def test_a_response_longer_than_the_response_length_is_an_error():
    with pytest.raises(ValueError, match="more than the response length 2"):
        assemble(_prompts(), [[1, 2, 3], [1]], [[0.0] * 3, [0.0]], n=1, response_length=2, pad_token_id=0)


def test_unpadded_rows_match_masking_each_row():
    """One masked select for the batch gives each row's own tokens (left padding, a fully padded row, none)."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 100, (6, 9), generator=gen)
    lengths = [9, 4, 0, 1, 7, 3]
    mask = torch.stack([torch.arange(9) >= 9 - n for n in lengths]).long()
    assert unpadded_rows(ids, mask) == [row[m.bool()].tolist() for row, m in zip(ids, mask)]
    assert [len(row) for row in unpadded_rows(ids, mask)] == lengths
    assert unpadded_rows(ids[:0], mask[:0]) == []
