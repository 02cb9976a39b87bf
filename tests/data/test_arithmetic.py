"""Quickstart arithmetic rows: verl schema, correct answers, distinct prompts, disjoint train/test."""

from __future__ import annotations

import pytest

from hybridrl.data.arithmetic import make_arithmetic_rows, make_arithmetic_splits, write_arithmetic_dataset
from hybridrl.data.dataset import RLDataset
from hybridrl.rewards import default_compute_score


def test_rows_have_verl_schema_and_right_answers():
    rows = make_arithmetic_rows(200, seed=0, max_operand=20, ops="+-*")
    assert rows[3]["data_source"] == "arithmetic" and rows[3]["ability"] == "math"
    assert [row["extra_info"] for row in rows[:2]] == [{"split": "train", "index": 0}, {"split": "train", "index": 1}]
    for row in rows:
        prompt = row["prompt"][0]["content"]
        assert row["prompt"][0]["role"] == "user" and prompt.endswith("=")
        # eval is safe here: the prompt is digits and one operator we generated.
        assert row["reward_model"] == {"style": "rule", "ground_truth": str(eval(prompt[:-1]))}
    assert len({row["prompt"][0]["content"] for row in rows}) == 200
    assert {row["prompt"][0]["content"][-2] for row in rows} <= set("0123456789")


def test_same_seed_same_rows_other_seed_other_rows():
    assert make_arithmetic_rows(20, seed=1) == make_arithmetic_rows(20, seed=1)
    assert make_arithmetic_rows(20, seed=1) != make_arithmetic_rows(20, seed=2)


def test_splits_do_not_overlap_even_when_nearly_exhaustive():
    train, test = make_arithmetic_splits(90, 10, seed=0, max_operand=9)  # 100 possible "a+b=" prompts
    train_prompts = {row["prompt"][0]["content"] for row in train}
    test_prompts = {row["prompt"][0]["content"] for row in test}
    assert len(train_prompts) == 90 and len(test_prompts) == 10 and not train_prompts & test_prompts
    assert {row["extra_info"]["split"] for row in test} == {"test"}


def test_too_many_rows_and_bad_ops_are_errors():
    with pytest.raises(ValueError, match="cannot make 100 distinct"):
        make_arithmetic_rows(100, seed=0, max_operand=9, exclude={"1+1="})
    with pytest.raises(ValueError, match="ops='/'"):
        make_arithmetic_rows(1, seed=0, ops="/")


def test_written_dataset_loads_and_scores(tmp_path, char_tokenizer):
    paths = write_arithmetic_dataset(tmp_path, num_train=64, num_test=16, seed=3)
    dataset = RLDataset(str(paths["test"]), char_tokenizer, max_prompt_length=16, return_raw_chat=True)
    assert len(dataset) == 16
    item = dataset[0]
    assert char_tokenizer.decode(item["input_ids"]) == item["raw_prompt"][0]["content"] + "<sep>"
    truth = item["reward_model"]["ground_truth"]
    assert default_compute_score(item["data_source"], f" {truth}", truth) == 1.0
