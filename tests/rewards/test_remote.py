"""Padded verl rows ↔ unpadded pooling rows: valid tokens out; last-token scores and shifted values in."""

from __future__ import annotations

import pytest
import torch

from hybridrl.rewards.remote import last_token_scores, shifted_response_values, valid_token_rows


def test_valid_token_rows_strip_left_and_right_padding():
    ids = torch.tensor([[0, 7, 8, 9, 0], [5, 6, 7, 8, 9]])
    mask = torch.tensor([[0, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    assert valid_token_rows(ids, mask) == ([[7, 8, 9], [5, 6, 7, 8, 9]], [1, 0])


@pytest.mark.parametrize("mask, phrase", [([[1, 0, 1]], "holes"), ([[0, 0, 0]], "no valid token")])
def test_valid_token_rows_refuse_holes_and_empty_rows(mask, phrase):
    with pytest.raises(ValueError, match=phrase):
        valid_token_rows(torch.tensor([[1, 2, 3]]), torch.tensor(mask))


def test_last_token_scores():
    assert last_token_scores([[1.0, 2.0, 3.0], [4.0]]).tolist() == [3.0, 4.0]


def test_shifted_values_follow_verl_critic_shift():
    # P = 3, R = 3. Row 0: prompt [pad, a, b], response [c, d, pad]; valid tokens a b c d start at column 1.
    # Response token t takes the output at padded column P-1+t = 2+t, i.e. valid index 1+t: b, c, (d masked).
    outputs = [[10.0, 11.0, 12.0, 13.0], [20.0, 21.0, 22.0, 23.0, 24.0, 25.0]]
    response_mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    values = shifted_response_values(outputs, [1, 0], prompt_len=3, response_mask=response_mask)
    assert values.tolist() == [[11.0, 12.0, 0.0], [22.0, 23.0, 24.0]]


def test_shifted_values_need_a_prompt_token():
    with pytest.raises(ValueError, match="no prompt token"):
        shifted_response_values([[1.0, 2.0]], [2], prompt_len=2, response_mask=torch.ones(1, 2))
