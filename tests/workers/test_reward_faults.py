"""RewardWorker under a misbehaving reward function: the background scoring of launch_reward_fn_async gives up on
a call it cannot stop, rows without ground truth are named (built-in scorers) or counted (custom functions)."""

from __future__ import annotations

import threading

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.rewards.manager import RewardFunctionError
from hybridrl.utils.batch import Batch
from hybridrl.workers.reward import RewardWorker

REWARD_FILE = '''
import time


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if extra_info and extra_info.get("block"):
        time.sleep(8)  # blocking, outside Python: no exception can be raised in it on a thread
    return float(ground_truth is not None)
'''


def _batch(char_tokenizer, truths: list, block_row: int | None = None, source: str = "arithmetic") -> Batch:
    rows = len(truths)
    ids = torch.tensor([char_tokenizer("12")["input_ids"]] * rows)
    batch = Batch({"responses": ids, "response_mask": torch.ones_like(ids)})
    batch["data_source"] = [source] * rows
    batch["reward_model"] = [{"style": "rule", "ground_truth": truth} if truth is not False else None
                             for truth in truths]
    batch["extra_info"] = [{"block": index == block_row} for index in range(rows)]
    return batch


def _worker(tmp_path, char_tokenizer, custom: bool, extra: list[str] = ()) -> RewardWorker:
    overrides = list(extra)
    if custom:
        path = tmp_path / "reward.py"
        path.write_text(REWARD_FILE)
        overrides.append(f"custom_reward_function.path={path}")
    return RewardWorker(load_config(overrides), char_tokenizer)


def test_background_scoring_gives_up_on_a_call_it_cannot_stop(tmp_path, char_tokenizer):
    worker = _worker(tmp_path, char_tokenizer, custom=True, extra=["reward_model.reward_fn_timeout_s=0.3"])
    future = worker.score_in_background(_batch(char_tokenizer, ["12", "12", "12"], block_row=1))
    with pytest.raises(RewardFunctionError) as error:
        future.result(timeout=60)
    message = str(error.value)
    assert "sample 1" in message and "could not be interrupted" in message and "num_workers=2" in message
    scoring = [t for t in threading.enumerate() if t.name == "hybridrl-reward"]
    assert scoring and all(t.daemon for t in scoring)  # abandoned, still asleep, never joined


def test_rows_without_ground_truth_are_named_for_built_in_scorers(tmp_path, char_tokenizer):
    worker = _worker(tmp_path, char_tokenizer, custom=False)
    with pytest.raises(RewardFunctionError, match=r"2 of 3 rows have no reward_model.ground_truth: rows 1 .*, 2 "):
        worker.compute_scores(_batch(char_tokenizer, ["12", None, False]))


def test_a_custom_function_gets_none_and_the_rows_are_counted(tmp_path, char_tokenizer, caplog):
    worker = _worker(tmp_path, char_tokenizer, custom=True)
    for _ in range(2):
        scores, _, metrics = worker.compute_scores(_batch(char_tokenizer, ["12", None, False]))
        assert metrics["reward/num_missing_ground_truth"] == 2.0
        assert scores["token_level_scores"].sum(-1).tolist() == [1.0, 0.0, 0.0]
    warnings = [r.getMessage() for r in caplog.records if "no reward_model.ground_truth" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("2 of 3 rows")
