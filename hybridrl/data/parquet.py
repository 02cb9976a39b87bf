"""Reading and writing verl-schema row files: parquet (via pyarrow) and OpenAI-style jsonl/json.

Rows are plain dicts (`data_source`, `prompt`, `ability`, `reward_model`, `extra_info`, ...).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hybridrl.data.errors import DataFileNotFoundError, DatasetError

ROW_FILE_SUFFIXES = (".parquet", ".jsonl", ".json")


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write `rows` to one parquet file (parent folders created); nested dicts/lists become structs/lists."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path).expanduser()
    if not rows:
        raise ValueError(f"refusing to write {path}: no rows were given (an empty dataset is a bug upstream)")
    try:
        table = pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise ValueError(f"cannot write {path}: the rows do not share one column type ({error}); "
                         "make every row's field the same type (e.g. all ints or all strings)") from error
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """All rows of one .parquet, .jsonl or .json (array of objects, or one object per line) file."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataFileNotFoundError(f"data file {path} does not exist; check data.train_files / data.val_files")
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except (pa.ArrowInvalid, OSError) as error:
            raise DatasetError(f"data file {path} is not a readable parquet file ({error}); rewrite it, e.g. "
                               f"with `hybridrl preprocess`") from error
    if path.suffix in (".jsonl", ".json"):
        return _read_json_rows(path)
    raise DatasetError(f"data file {path} has an unsupported type {path.suffix!r}; use one of {ROW_FILE_SUFFIXES}")


def _read_json_rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        rows = json.loads(text)
    else:
        rows = [_parse_json_line(path, number, line)
                for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DatasetError(f"{path}: row {index} is a {type(row).__name__}, expected a JSON object with named fields")
    return rows


def _parse_json_line(path: Path, line_number: int, line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise DatasetError(f"{path}: line {line_number} is not valid JSON ({error.msg}); fix or remove that line") \
            from error
