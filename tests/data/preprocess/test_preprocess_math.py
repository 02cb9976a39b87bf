"""MATH preprocessor on lighteval-layout parquet and jsonl: boxed ground truths, schema, bad rows."""

from __future__ import annotations

import json

import pytest

from hybridrl.data.parquet import read_rows, write_parquet
from hybridrl.data.preprocess.math import INSTRUCTION, main
from hybridrl.rewards.math import compute_score

RAW = [
    {"problem": "What is $1+1$?", "solution": "We add: $1+1=\\boxed{2}$.", "level": "Level 1", "type": "Algebra"},
    {"problem": "Simplify $\\frac{2}{4}$.", "solution": "First $\\boxed{3}$, no: $\\boxed{\\frac{1}{2}}$.",
     "level": "Level 2", "type": "Algebra"},
    {"problem": "Compute $2^3$.", "solution": "It is $\\boxed 8$.", "level": "Level 1", "type": "Algebra"},
    {"problem": "Pick.", "solution": "The choice is \\fbox{B}", "level": "Level 1", "type": "Algebra"},
]


def test_lighteval_parquet_layout_with_exact_schema(tmp_path):
    write_parquet(RAW, tmp_path / "raw" / "data" / "train-00000-of-00001.parquet")
    write_parquet(RAW[:1], tmp_path / "raw" / "data" / "test-00000-of-00001.parquet")
    assert main(["--local_dataset_path", str(tmp_path / "raw"), "--local_save_dir", str(tmp_path / "out")]) == 0
    rows = read_rows(tmp_path / "out" / "train.parquet")
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["2", "\\frac{1}{2}", "8", "B"]
    assert rows[1] == {
        "data_source": "DigitalLearningGmbH/MATH-lighteval",
        "prompt": [{"role": "user", "content": "Simplify $\\frac{2}{4}$. " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "\\frac{1}{2}"},
        "extra_info": {"split": "train", "index": 1},
    }
    assert len(read_rows(tmp_path / "out" / "test.parquet")) == 1
    # Each \\boxed reference solution earns full reward against its own ground truth; an \\fbox one scores 0,
    # as in verl's MATH reward (it finds the box, then cannot unbox it).
    scores = [compute_score(raw["solution"], row["reward_model"]["ground_truth"]) for raw, row in zip(RAW, rows)]
    assert scores == [1.0, 1.0, 1.0, 0.0]


def test_data_source_flag_and_jsonl(tmp_path):
    (tmp_path / "test.jsonl").write_text("\n".join(json.dumps(r) for r in RAW))
    assert main(["--local_dataset_path", str(tmp_path / "test.jsonl"), "--local_save_dir", str(tmp_path / "o"),
                 "--data_source", "HuggingFaceH4/MATH-500"]) == 0
    assert {r["data_source"] for r in read_rows(tmp_path / "o" / "test.parquet")} == {"HuggingFaceH4/MATH-500"}


@pytest.mark.parametrize("bad_row, problem", [({"problem": "p"}, "row 1 has no 'solution'"),
                                               ({"problem": "p", "solution": "it is 4"}, "row 1 solution has no"),
                                               ({"problem": "p", "solution": "\\boxed{4"}, "row 1 solution has no")])
def test_bad_rows_name_file_row_and_problem(tmp_path, capsys, bad_row, problem):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(RAW[0]) + "\n" + json.dumps(bad_row) + "\n")
    assert main(["--local_dataset_path", str(path), "--local_save_dir", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert str(path) in error and problem in error
