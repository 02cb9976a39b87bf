"""The reward role: a multi-turn trajectory is scored on its whole text, at its last token (verl's rule)."""

from __future__ import annotations

import numpy as np
import torch

from hybridrl.config import load_config
from hybridrl.utils.batch import Batch
from hybridrl.workers.reward import RewardWorker, decode_responses, response_valid_mask


def trajectory_batch(tokenizer) -> Batch:
    """One row: model tokens "#### ", observation tokens "1" (response_mask 0), model tokens "2", then padding."""
    model1, tool, model2 = tokenizer.encode("#### "), tokenizer.encode("1"), tokenizer.encode("2")
    ids = model1 + tool + model2
    responses = torch.tensor([ids + [0, 0]])
    response_mask = torch.tensor([[1] * len(model1) + [0] * len(tool) + [1] * len(model2) + [0, 0]])
    attention = torch.tensor([[1, 1] + [1] * len(ids) + [0, 0]])
    return Batch({"prompts": torch.ones(1, 2, dtype=torch.long), "responses": responses,
                  "response_mask": response_mask, "attention_mask": attention},
                 {"data_source": np.array(["openai/gsm8k"], dtype=object),
                  "reward_model": [{"ground_truth": "12"}]})


def test_tool_tokens_are_part_of_the_scored_text_and_the_score_sits_on_the_last_token(char_tokenizer):
    batch = trajectory_batch(char_tokenizer)
    assert decode_responses(char_tokenizer, batch) == ["#### 12"]
    assert response_valid_mask(batch).tolist() == [[1] * 7 + [0, 0]]
    scores, _, _ = RewardWorker(load_config([]), char_tokenizer).compute_scores(batch)
    assert scores["token_level_scores"].tolist() == [[0.0] * 6 + [1.0, 0.0, 0.0]]


def test_without_an_attention_mask_the_response_mask_decides(char_tokenizer):
    batch = trajectory_batch(char_tokenizer)
    batch.pop("attention_mask")
    assert decode_responses(char_tokenizer, batch) == ["#### 2"]
