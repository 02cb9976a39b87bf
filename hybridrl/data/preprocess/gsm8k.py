"""GSM8K → verl-schema parquet, exactly as verl's examples/data_preprocess/gsm8k.py.

    python -m hybridrl.data.preprocess.gsm8k --local_dataset_path PATH --local_save_dir ~/data/gsm8k
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from hybridrl.data.preprocess.common import build_parser, convert_splits, download_splits, read_local_splits, run_cli, \
    write_splits

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_FINAL_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")


def extract_ground_truth(answer: str) -> str | None:
    """The number after the first "#### " with commas removed ("#### 1,000" → "1000"), or None."""
    match = _FINAL_ANSWER.search(answer)
    return None if match is None else match.group(1).replace(",", "")


def make_row(question: str, answer: str, split: str, index: int) -> dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_ground_truth(answer)},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def convert_rows(raw_rows: list[dict], split: str, source: str, first_index: int = 0) -> list[dict[str, Any]]:
    """verl rows from raw GSM8K rows; a row without question/answer or "#### N" is an error naming it."""
    rows = []
    for number, raw in enumerate(raw_rows):
        for key in ("question", "answer"):
            if not isinstance(raw.get(key), str):
                raise ValueError(f"{source}: row {number} has no {key!r} text (columns: {sorted(raw)}); "
                                 f"GSM8K rows need 'question' and 'answer'")
        if extract_ground_truth(raw["answer"]) is None:
            raise ValueError(f"{source}: row {number} answer has no final '#### <number>' line: "
                             f"{raw['answer'][-120:]!r}; fix or remove the row")
        rows.append(make_row(raw["question"], raw["answer"], split, first_index + number))
    return rows


def preprocess(local_dataset_path: str | Path | None, local_save_dir: str | Path) -> dict[str, Path]:
    """Read GSM8K (local files, else the HF hub), write `{save_dir}/{train,test}.parquet`; returns the paths."""
    raw = read_local_splits(local_dataset_path) if local_dataset_path else download_splits(DATA_SOURCE, "main")
    return write_splits(convert_splits(raw, convert_rows), local_save_dir)


def _run(args: argparse.Namespace) -> None:
    preprocess(args.local_dataset_path, args.local_save_dir)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser("GSM8K to verl-schema parquet", default_save_dir="~/data/gsm8k")
    return run_cli(argv, parser, _run)


if __name__ == "__main__":
    raise SystemExit(main())
