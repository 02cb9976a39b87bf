"""MATH (hendrycks / DigitalLearningGmbH/MATH-lighteval layout) → verl-schema parquet, as verl's
examples/data_preprocess/math_dataset.py: ground truth = the last boxed answer of the reference solution.

    python -m hybridrl.data.preprocess.math --local_dataset_path PATH --local_save_dir ~/data/math
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import Any

from hybridrl.data.preprocess.common import build_parser, convert_splits, download_splits, read_local_splits, run_cli, \
    write_splits
from hybridrl.rewards.math import extract_boxed_answer

DEFAULT_DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def make_row(problem: str, ground_truth: str, split: str, index: int, data_source: str) -> dict[str, Any]:
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": problem + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index},
    }


def convert_rows(raw_rows: list[dict], split: str, source: str, first_index: int = 0,
                 data_source: str = DEFAULT_DATA_SOURCE) -> list[dict[str, Any]]:
    """verl rows from raw MATH rows; a row without problem/solution or a boxed answer is an error naming it."""
    rows = []
    for number, raw in enumerate(raw_rows):
        for key in ("problem", "solution"):
            if not isinstance(raw.get(key), str):
                raise ValueError(f"{source}: row {number} has no {key!r} text (columns: {sorted(raw)}); "
                                 f"MATH rows need 'problem' and 'solution'")
        ground_truth = extract_boxed_answer(raw["solution"])
        if ground_truth is None:
            raise ValueError(f"{source}: row {number} solution has no complete \\boxed{{...}} answer: "
                             f"{raw['solution'][-120:]!r}; fix or remove the row")
        rows.append(make_row(raw["problem"], ground_truth, split, first_index + number, data_source))
    return rows


def preprocess(local_dataset_path: str | Path | None, local_save_dir: str | Path,
               data_source: str = DEFAULT_DATA_SOURCE) -> dict[str, Path]:
    """Read MATH (local jsonl/parquet, else `data_source` from the HF hub) and write `{save_dir}/{split}.parquet`."""
    raw = read_local_splits(local_dataset_path) if local_dataset_path else download_splits(data_source, None)
    return write_splits(convert_splits(raw, functools.partial(convert_rows, data_source=data_source)), local_save_dir)


def _run(args: argparse.Namespace) -> None:
    preprocess(args.local_dataset_path, args.local_save_dir, args.data_source)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser("MATH to verl-schema parquet", default_save_dir="~/data/math")
    parser.add_argument("--data_source", default=DEFAULT_DATA_SOURCE,
                        help="data_source written to every row (picks the reward), and the HF dataset to download")
    return run_cli(argv, parser, _run)


if __name__ == "__main__":
    raise SystemExit(main())
