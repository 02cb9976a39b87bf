"""Row files: parquet round trip, jsonl/json reading and the errors for bad files."""

from __future__ import annotations

import pytest

from hybridrl.data.parquet import read_rows, write_parquet

ROWS = [
    {"data_source": "arithmetic", "prompt": [{"role": "user", "content": "1+2="}],
     "reward_model": {"style": "rule", "ground_truth": "3"}, "extra_info": {"split": "train", "index": 0}},
    {"data_source": "arithmetic", "prompt": [{"role": "user", "content": "4+4="}],
     "reward_model": {"style": "rule", "ground_truth": "8"}, "extra_info": {"split": "train", "index": 1}},
]


def test_parquet_round_trip_keeps_nested_fields(tmp_path):
    path = write_parquet(ROWS, tmp_path / "sub" / "rows.parquet")
    assert path.exists()
    assert read_rows(path) == ROWS


def test_jsonl_and_json_array_are_read(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"q": 1}\n\n{"q": 2}\n')
    (tmp_path / "b.json").write_text('[{"q": 3}]')
    assert read_rows(tmp_path / "a.jsonl") == [{"q": 1}, {"q": 2}]
    assert read_rows(tmp_path / "b.json") == [{"q": 3}]


def test_bad_json_line_is_named(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"q": 1}\n{"q": \n')
    with pytest.raises(ValueError, match=r"bad.jsonl: line 2 is not valid JSON"):
        read_rows(tmp_path / "bad.jsonl")


def test_unsupported_missing_and_empty_are_errors(tmp_path):
    (tmp_path / "rows.csv").write_text("q\n1\n")
    with pytest.raises(ValueError, match="unsupported type '.csv'"):
        read_rows(tmp_path / "rows.csv")
    with pytest.raises(FileNotFoundError, match="data.train_files"):
        read_rows(tmp_path / "missing.parquet")
    with pytest.raises(ValueError, match="no rows"):
        write_parquet([], tmp_path / "empty.parquet")


def test_inconsistent_column_types_are_an_error(tmp_path):
    with pytest.raises(ValueError, match="same type"):
        write_parquet([{"x": 1}, {"x": "one"}], tmp_path / "mixed.parquet")
