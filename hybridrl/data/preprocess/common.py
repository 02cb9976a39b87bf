"""Shared pieces of the dataset preprocessors: finding local split files, the optional HF download,
the command line (verl's flags) and writing `{split}.parquet`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

from hybridrl.data.parquet import read_rows, write_parquet

SPLITS = ("train", "test")
# Layouts seen in the wild: OpenAI's jsonl, HF hub parquet shards (`main/train-00000-of-00001.parquet`).
_SPLIT_PATTERNS = ("{split}.jsonl", "{split}.json", "{split}.parquet", "{split}-*.parquet",
                   "main/{split}.parquet", "main/{split}-*.parquet", "data/{split}.parquet", "data/{split}-*.parquet")

RawSplits = dict[str, list[tuple[str, list[dict[str, Any]]]]]  # split → [(source file, raw rows)]


def find_split_files(path: Path) -> dict[str, list[Path]]:
    """Files per split under a folder (first matching layout), or the split a single file's name starts with."""
    if path.is_file():
        split = next((s for s in SPLITS if path.name.startswith(s)), None)
        if split is None:
            raise ValueError(f"cannot tell the split of {path}: its name should start with 'train' or 'test' "
                             f"(e.g. train.jsonl); or pass the folder holding train/test files")
        return {split: [path]}
    if not path.is_dir():
        raise FileNotFoundError(f"--local_dataset_path {path} does not exist")
    found = {}
    for split in SPLITS:
        for pattern in _SPLIT_PATTERNS:
            matches = sorted(path.glob(pattern.format(split=split)))
            if matches:
                found[split] = matches
                break
    if not found:
        present = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())[:20]
        raise FileNotFoundError(f"no train/test files under {path} (looked for {', '.join(_SPLIT_PATTERNS)}); "
                                f"found: {present or 'nothing'}")
    return found


def read_local_splits(path: str | Path) -> RawSplits:
    files = find_split_files(Path(path).expanduser())
    return {split: [(str(file), read_rows(file)) for file in split_files] for split, split_files in files.items()}


def download_splits(hf_name: str, hf_config: str | None) -> RawSplits:
    """All splits of an HF hub dataset through the optional `datasets` package."""
    try:
        import datasets
    except ImportError as error:
        raise ImportError(f"loading {hf_name} needs the datasets package: pip install 'hybridrl[datasets]'; "
                          f"or pass --local_dataset_path to a downloaded copy") from error
    try:
        loaded = datasets.load_dataset(hf_name, hf_config)
    except Exception as error:
        raise RuntimeError(f"could not load {hf_name} from the HF hub ({type(error).__name__}: {error}); "
                           f"pass --local_dataset_path to a downloaded copy") from error
    return {split: [(f"{hf_name}[{split}]", loaded[split].to_list())] for split in SPLITS if split in loaded}


def convert_splits(raw_splits: RawSplits, convert_rows: Callable[..., list[dict]]) -> dict[str, list[dict]]:
    """Per split, every file's rows through `convert_rows(raw_rows, split, source, first_index=...)`;
    `extra_info.index` counts on across a split's shards."""
    converted = {}
    for split, sources in raw_splits.items():
        rows: list[dict] = []
        for source, raw_rows in sources:
            rows.extend(convert_rows(raw_rows, split, source, first_index=len(rows)))
        converted[split] = rows
    return converted


def build_parser(description: str, default_save_dir: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--local_dataset_path", default=None,
                        help="folder or file of the raw dataset (jsonl or parquet); without it, download via datasets")
    parser.add_argument("--local_save_dir", "--local_dir", dest="local_save_dir", default=default_save_dir,
                        help="where train.parquet and test.parquet are written (--local_dir is the older name)")
    parser.add_argument("--hdfs_dir", default=None, help="not supported: copy the written files yourself")
    return parser


def write_splits(rows_by_split: dict[str, list[dict]], save_dir: str | Path) -> dict[str, Path]:
    save_dir = Path(save_dir).expanduser()
    written = {split: write_parquet(rows, save_dir / f"{split}.parquet") for split, rows in rows_by_split.items()}
    for split, path in written.items():
        print(f"wrote {len(rows_by_split[split])} {split} rows to {path}")
    for split in SPLITS:
        if split not in written:
            print(f"no {split} split in the input; {split}.parquet was not written", file=sys.stderr)
    return written


def run_cli(argv: list[str] | None, parser: argparse.ArgumentParser, run: Callable[[argparse.Namespace], Any]) -> int:
    """Parse `argv`, call `run(args)`; a data or setup problem prints one `error:` line and returns 1."""
    args = parser.parse_args(argv)
    if args.hdfs_dir:
        print("error: --hdfs_dir is not supported; copy the written parquet files to HDFS yourself", file=sys.stderr)
        return 1
    try:
        run(args)
    except (ValueError, FileNotFoundError, ImportError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
