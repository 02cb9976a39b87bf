"""Fixtures for data tests: the real GSM8K converted once per session by our preprocessor."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def gsm8k_parquet_dir(gsm8k_dir: Path, tmp_path_factory) -> Path:
    from hybridrl.data.preprocess.gsm8k import preprocess

    out = tmp_path_factory.mktemp("gsm8k_parquet")
    preprocess(gsm8k_dir, out)
    return out
