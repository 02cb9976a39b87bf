"""`hybridrl sft` on real GSM8K rows: prompts of any length by default, a limit that lists the rows over it."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForCausalLM

from hybridrl.cli import main as cli_main
from hybridrl.data.parquet import write_parquet
from hybridrl.data.preprocess.gsm8k import make_row
from hybridrl.models.tiny import save_tiny_model_dir


@pytest.fixture
def gsm8k_rows_file(gsm8k_dir, tmp_path) -> str:
    with open(gsm8k_dir / "train.jsonl", encoding="utf-8") as handle:
        raw = [json.loads(next(handle)) for _ in range(8)]
    return str(write_parquet([make_row(r["question"], r["answer"], "train", i) for i, r in enumerate(raw)],
                             tmp_path / "gsm8k.parquet"))


@pytest.fixture
def long_context_model(tmp_path) -> str:
    return save_tiny_model_dir(str(tmp_path / "base"), arch="qwen2", seed=0, hidden_size=32, num_layers=1,
                               num_heads=2, num_kv_heads=1, intermediate_size=64, max_position_embeddings=1024)


def test_sft_trains_on_gsm8k_prompts_longer_than_64_tokens(gsm8k_rows_file, long_context_model, tmp_path, capsys):
    out = tmp_path / "sft"
    args = ["sft", "--model", long_context_model, "--train-files", gsm8k_rows_file, "--out", str(out),
            "--batch-size", "4", "--epochs", "1"]
    assert cli_main(args) == 0
    assert AutoModelForCausalLM.from_pretrained(str(out)).config.num_hidden_layers == 1
    assert cli_main(args + ["--max-prompt-length", "64"]) == 1  # a limit the rows exceed: all named, no traceback
    err = capsys.readouterr().err
    assert "8 of 8 prompts longer than data.max_prompt_length=64" in err and "Traceback" not in err
    assert cli_main(args + ["--max-prompt-length", "64", "--truncation", "left"]) == 0
