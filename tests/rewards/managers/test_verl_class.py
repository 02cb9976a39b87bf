"""reward_manager.source=importlib: verl-style classes read a DataProto-like view; hybridrl-style classes work too."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hybridrl.config.errors import ConfigError
from hybridrl.rewards.managers import build_reward_manager
from hybridrl.utils.batch import Batch
from hybridrl.workers.reward import RewardWorker
from tests.rewards.managers.helpers import config

VERL_STYLE = '''
import torch
from collections import defaultdict


class LengthBonusManager:
    """Written as for verl: AbstractRewardManager's constructor and __call__(data, return_dict)."""

    def __init__(self, tokenizer, num_examine, compute_score=None, reward_fn_key="data_source", bonus=0.0):
        self.tokenizer, self.compute_score, self.key, self.bonus = tokenizer, compute_score, reward_fn_key, bonus

    def __call__(self, data, return_dict=False):
        reward = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        extra = defaultdict(list)
        prompt_len = data.batch["prompts"].shape[-1]
        for i in range(len(data)):
            item = data[i]
            length = int(item.batch["attention_mask"][prompt_len:].sum())
            text = self.tokenizer.decode(item.batch["responses"][:length], skip_special_tokens=True)
            score = self.compute_score(item.non_tensor_batch[self.key], text,
                                       item.non_tensor_batch["reward_model"]["ground_truth"])
            reward[i, length - 1] = score + self.bonus
            extra["length"].append(length)
        return {"reward_tensor": reward, "reward_extra_info": extra} if return_dict else reward


class LoopStyle:
    async def run_single(self, data):
        return {}
'''


@pytest.fixture
def manager_file(tmp_path):
    path = tmp_path / "my_manager.py"
    path.write_text(VERL_STYLE)
    return str(path)


def rollout_batch(tokenizer, responses: list[str], truths: list[str]) -> Batch:
    """Two-token prompts, right-padded responses, as the rollout worker hands them over."""
    encoded = [tokenizer.encode(text) for text in responses]
    width = max(len(ids) for ids in encoded)
    response_ids = torch.tensor([ids + [0] * (width - len(ids)) for ids in encoded])
    response_mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in encoded])
    prompts = torch.ones(len(responses), 2, dtype=torch.long)
    return Batch({"prompts": prompts, "responses": response_ids, "response_mask": response_mask,
                  "attention_mask": torch.cat([torch.ones_like(prompts), response_mask], 1)},
                 {"data_source": np.array(["openai/gsm8k"] * len(responses), dtype=object),
                  "reward_model": [{"ground_truth": truth} for truth in truths]})


def test_a_verl_style_class_scores_through_the_reward_worker(manager_file, char_tokenizer):
    cfg = config("reward_manager.source=importlib", "reward_manager.name=LengthBonusManager",
                 f"reward_manager.module.path={manager_file}", "+reward_model.reward_kwargs.bonus=0.5")
    worker = RewardWorker(cfg, char_tokenizer)
    scores, extra, metrics = worker.compute_scores(rollout_batch(char_tokenizer, ["#### 12", "#### 3"], ["12", "12"]))
    expected = torch.zeros(2, 7)
    expected[0, 6], expected[1, 5] = 1.5, 0.5
    assert torch.equal(scores["token_level_scores"], expected)
    assert extra == {"length": [7, 6]} and metrics == {"reward/num_errors": 0.0}


def test_rows_carry_verls_extra_info_additions(tmp_path, char_tokenizer):
    path = tmp_path / "seen.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                    "    return {'score': 0.0, 'turns': extra_info['num_turns'], 'index': extra_info.get('index'),\n"
                    "            'rollout': extra_info['rollout_reward_scores']}\n")
    worker = RewardWorker(config(f"custom_reward_function.path={path}"), char_tokenizer)
    batch = rollout_batch(char_tokenizer, ["a", "b"], ["x", "y"])
    batch["extra_info"] = [{"index": 7}, None]
    _, extra, _ = worker.compute_scores(batch)
    assert extra == {"turns": [None, None], "index": [7, None], "rollout": [{}, {}]}
    assert batch["extra_info"][0] == {"index": 7}  # the batch's own dicts are not changed
    batch["__num_turns__"] = [3, 1]
    assert worker.compute_scores(batch)[1]["turns"] == [3, 1]


def test_a_hybridrl_style_class_gets_the_context(tmp_path, char_tokenizer):
    path = tmp_path / "ours.py"
    path.write_text("from hybridrl.rewards.manager import ScoredBatch\n"
                    "class Half:\n"
                    "    def __init__(self, context, **kwargs):\n        self.context = context\n"
                    "    def __call__(self, batch, rows):\n        return ScoredBatch(scores=[0.5] * len(rows))\n"
                    "    def close(self):\n        pass\n")
    cfg = config("reward_manager.source=importlib", "reward_manager.name=Half", f"reward_manager.module.path={path}")
    worker = RewardWorker(cfg, char_tokenizer)
    scores, _, _ = worker.compute_scores(rollout_batch(char_tokenizer, ["ab"], ["x"]))
    assert scores["token_level_scores"].tolist() == [[0.0, 0.5]]


@pytest.mark.parametrize("overrides, message", [
    (("reward_manager.name=Missing",), r"defines no class 'Missing'; classes there: \['LengthBonusManager', 'LoopStyle'\]"),
    (("reward_manager.name=LoopStyle",), "verl reward-loop manager"),
])
def test_bad_classes_are_refused_by_name(manager_file, overrides, message):
    cfg = config("reward_manager.source=importlib", f"reward_manager.module.path={manager_file}", *overrides)
    with pytest.raises(ConfigError, match=message):
        build_reward_manager(cfg, None)


def test_missing_path_and_verl_imports(tmp_path):
    with pytest.raises(ConfigError, match="needs reward_manager.module.path"):
        build_reward_manager(config("reward_manager.source=importlib", "reward_manager.name=X"), None)
    path = tmp_path / "needs_verl.py"
    path.write_text("from verl import DataProto\nclass X:\n    pass\n")
    with pytest.raises(ConfigError, match="imports verl.*drop those imports"):
        build_reward_manager(config("reward_manager.source=importlib", "reward_manager.name=X",
                                    f"reward_manager.module.path={path}"), None)
