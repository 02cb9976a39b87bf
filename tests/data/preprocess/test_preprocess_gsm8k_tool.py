"""`hybridrl preprocess gsm8k --tool` on real GSM8K rows: verl's gsm8k_tool_agent_loop.py row format."""

from __future__ import annotations

from hybridrl.cli import main as cli_main
from hybridrl.data.parquet import read_rows
from hybridrl.data.preprocess.gsm8k import TOOL_SYSTEM_PROMPT


def test_tool_rows_follow_verls_tool_agent_format(tmp_path, gsm8k_dir):
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = (gsm8k_dir / "train.jsonl").read_text().splitlines()[:5]
    (raw / "train.jsonl").write_text("\n".join(lines) + "\n")
    assert cli_main(["preprocess", "gsm8k", "--tool", "--local_dataset_path", str(raw),
                     "--local_save_dir", str(tmp_path / "out")]) == 0
    rows = read_rows(tmp_path / "out" / "train.parquet")
    assert len(rows) == 5
    first = rows[0]
    assert list(first) == ["data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"]
    assert (first["data_source"], first["agent_name"], first["ability"]) == ("openai/gsm8k", "tool_agent", "math")
    assert first["prompt"][0] == {"role": "system", "content": TOOL_SYSTEM_PROMPT}
    assert "use the `calc_gsm8k_reward` tool" in TOOL_SYSTEM_PROMPT
    assert first["prompt"][1]["content"].endswith("in April and May? Let's think step by step and output the final "
                                                  "answer after `####`.")
    assert first["reward_model"] == {"style": "rule", "ground_truth": "72"}
    extra = first["extra_info"]
    assert (extra["split"], extra["index"], extra["need_tools_kwargs"]) == ("train", 0, True)
    assert extra["tools_kwargs"] == {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "72"}}}
    assert [r["extra_info"]["tools_kwargs"]["calc_gsm8k_reward"]["create_kwargs"]["ground_truth"] for r in rows] == \
        [r["reward_model"]["ground_truth"] for r in rows]


def test_plain_rows_are_unchanged_without_the_flag(tmp_path, gsm8k_dir):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "test.jsonl").write_text((gsm8k_dir / "test.jsonl").read_text().splitlines()[0] + "\n")
    assert cli_main(["preprocess", "gsm8k", "--local_dataset_path", str(raw), "--local_save_dir", str(tmp_path / "o")]) == 0
    (row,) = read_rows(tmp_path / "o" / "test.parquet")
    assert "agent_name" not in row and len(row["prompt"]) == 1 and "tools_kwargs" not in row["extra_info"]


def test_interaction_rows_follow_verls_interaction_format(tmp_path, gsm8k_dir):
    from hybridrl.data.preprocess.gsm8k import INTERACTION_SYSTEM_PROMPT

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train.jsonl").write_text("\n".join((gsm8k_dir / "train.jsonl").read_text().splitlines()[:2]) + "\n")
    assert cli_main(["preprocess", "gsm8k", "--interaction", "--local_dataset_path", str(raw),
                     "--local_save_dir", str(tmp_path / "out")]) == 0
    first = read_rows(tmp_path / "out" / "train.parquet")[0]
    assert "agent_name" not in first  # verl's rows run the default loop (multi_turn.enable: tool_agent)
    assert first["prompt"][0] == {"role": "system", "content": INTERACTION_SYSTEM_PROMPT}
    assert first["extra_info"]["interaction_kwargs"] == {"name": "gsm8k", "query": first["prompt"][1]["content"],
                                                         "ground_truth": "72"}
