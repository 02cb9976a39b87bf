"""Fixtures for trainer tests: a tiny model directory and the arithmetic task as verl parquet."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def arithmetic_files(tmp_path_factory):
    from hybridrl.data.arithmetic import make_arithmetic_rows
    from hybridrl.data.parquet import write_parquet

    root = tmp_path_factory.mktemp("arith")
    test_rows = make_arithmetic_rows(16, seed=1, split="test")
    train_rows = make_arithmetic_rows(64, seed=0, split="train", exclude={r["prompt"][0]["content"] for r in test_rows})
    train, test = str(root / "train.parquet"), str(root / "test.parquet")
    write_parquet(train_rows, train)
    write_parquet(test_rows, test)
    return train, test


@pytest.fixture(scope="session")
def arith_model_dir(tmp_path_factory) -> str:
    from hybridrl.models.tiny import save_tiny_model_dir

    return save_tiny_model_dir(str(tmp_path_factory.mktemp("arith_model")), arch="qwen2", seed=0,
                               chars="0123456789+=", hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                               intermediate_size=64, max_position_embeddings=64)
