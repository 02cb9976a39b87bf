"""GSM8K preprocessor on the real shared files: counts, exact verl schema, every ground truth scores 1.0."""

from __future__ import annotations

import json
import sys

import pyarrow.parquet as pq
import pytest

from hybridrl.data.parquet import read_rows, write_parquet
from hybridrl.data.preprocess import PREPROCESSORS
from hybridrl.data.preprocess.gsm8k import INSTRUCTION, main
from hybridrl.rewards.gsm8k import compute_score


def test_real_gsm8k_schema_counts_and_ground_truths(gsm8k_parquet_dir):
    for split, count in (("train", 7473), ("test", 1319)):
        table = pq.read_table(gsm8k_parquet_dir / f"{split}.parquet")
        assert table.num_rows == count
        assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        for index, row in enumerate(table.to_pylist()):
            extra = row["extra_info"]
            assert extra == {"split": split, "index": index, "answer": extra["answer"], "question": extra["question"]}
            assert row["data_source"] == "openai/gsm8k" and row["ability"] == "math"
            assert row["prompt"] == [{"role": "user", "content": extra["question"] + " " + INSTRUCTION}]
            assert row["reward_model"]["style"] == "rule"
            # The row's own reference solution ends with "#### N": it must earn full reward.
            assert compute_score(extra["answer"], row["reward_model"]["ground_truth"]) == 1.0, (split, index)


def test_first_train_row_by_hand(gsm8k_parquet_dir):
    row = read_rows(gsm8k_parquet_dir / "train.parquet")[0]
    assert row["reward_model"] == {"style": "rule", "ground_truth": "72"}
    assert row["prompt"][0]["content"].endswith('April and May? Let\'s think step by step and output the final '
                                                'answer after "####".')


def test_commas_are_removed_from_ground_truth(gsm8k_parquet_dir):
    rows = read_rows(gsm8k_parquet_dir / "train.parquet")
    with_comma = [r for r in rows if "#### " in r["extra_info"]["answer"]
                  and "," in r["extra_info"]["answer"].split("#### ")[-1]]
    assert with_comma, "GSM8K has answers like '#### 1,600'"
    for row in with_comma:
        assert row["reward_model"]["ground_truth"] == row["extra_info"]["answer"].split("#### ")[-1].replace(",", "")


def test_single_file_and_hf_parquet_layout_and_local_dir_alias(tmp_path, gsm8k_dir):
    assert main(["--local_dataset_path", str(gsm8k_dir / "test.jsonl"), "--local_dir", str(tmp_path / "a")]) == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["test.parquet"]
    raw = [json.loads(line) for line in (gsm8k_dir / "test.jsonl").read_text().splitlines()[:4]]
    write_parquet(raw[:2], tmp_path / "hf" / "main" / "test-00000-of-00002.parquet")
    write_parquet(raw[2:], tmp_path / "hf" / "main" / "test-00001-of-00002.parquet")
    assert main(["--local_dataset_path", str(tmp_path / "hf"), "--local_save_dir", str(tmp_path / "b")]) == 0
    rows = read_rows(tmp_path / "b" / "test.parquet")
    assert [r["extra_info"]["index"] for r in rows] == [0, 1, 2, 3]
    assert [r["extra_info"]["question"] for r in rows] == [r["question"] for r in raw]


@pytest.mark.parametrize("bad_row, problem", [({"question": "q"}, "row 1 has no 'answer'"),
                                               ({"question": "q", "answer": "42"}, "row 1 answer has no final")])
def test_bad_rows_name_file_row_and_problem(tmp_path, capsys, bad_row, problem):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n" + json.dumps(bad_row) + "\n")
    assert main(["--local_dataset_path", str(path), "--local_save_dir", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert str(path) in error and problem in error
    assert not (tmp_path / "out").exists()


def test_without_local_path_or_datasets_the_error_says_what_to_do(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    assert main(["--local_save_dir", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert "pip install 'hybridrl[datasets]'" in error and "--local_dataset_path" in error


def test_hdfs_dir_is_refused_and_registry_lists_modules(tmp_path, capsys):
    assert main(["--local_dataset_path", str(tmp_path), "--hdfs_dir", "hdfs://x"]) == 1
    assert "--hdfs_dir is not supported" in capsys.readouterr().err
    assert PREPROCESSORS["gsm8k"] == "hybridrl.data.preprocess.gsm8k"
    assert PREPROCESSORS["math"] == "hybridrl.data.preprocess.math"


def test_empty_folder_lists_what_it_looked_for(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x")
    assert main(["--local_dataset_path", str(tmp_path), "--local_save_dir", str(tmp_path / "o")]) == 1
    assert "no train/test files" in capsys.readouterr().err
