"""The `file` logger: one JSON object per step appended to `<local_dir>/metrics.jsonl` (and, with
trainer.log_val_generations, the validation samples to `<local_dir>/val_generations.jsonl`).

Each line is `{"step": N, "<key>": value, ...}` with plain ints/floats. JSON has no NaN/Infinity, so a
non-finite value is written as `null` and its key listed under `"_nonfinite"` (e.g. `["actor/pg_loss"]`).
A resumed run appends to the same file; readers merge the records of a repeated step, the later value winning
per key (a resumed run's validation before training lands on the step it resumed at, beside its training metrics).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping

METRICS_FILENAME = "metrics.jsonl"
GENERATIONS_FILENAME = "val_generations.jsonl"  # trainer.log_val_generations: one sample per line
NONFINITE_KEY = "_nonfinite"


def encode_record(step: int, metrics: Mapping[str, float | int]) -> dict[str, Any]:
    """The JSON-safe record for one step: non-finite floats → None, their keys under `_nonfinite`."""
    if "step" in metrics or NONFINITE_KEY in metrics:
        raise ValueError(f"metric names 'step' and {NONFINITE_KEY!r} are reserved by the file logger; rename the metric")
    record: dict[str, Any] = {"step": int(step)}
    nonfinite: list[str] = []
    for key, value in metrics.items():
        if isinstance(value, float) and not math.isfinite(value):
            record[key] = None
            nonfinite.append(key)
        else:
            record[key] = value
    if nonfinite:
        record[NONFINITE_KEY] = nonfinite
    return record


def decode_record(record: dict[str, Any]) -> dict[str, Any]:
    """Inverse of `encode_record` up to the exact non-finite value: listed keys come back as NaN."""
    record = dict(record)
    for key in record.pop(NONFINITE_KEY, []):
        record[key] = math.nan
    return record


def read_metrics_jsonl(path: str) -> dict[int, dict[str, Any]]:
    """step → metrics (without "step"); records of a repeated step merged, a later value winning per key."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"metrics file {path!r} does not exist; point at <trainer local dir>/{METRICS_FILENAME}")
    by_step: dict[int, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = decode_record(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{line_number} is not valid JSON ({error}); was the file truncated?") from error
            if "step" not in record:
                raise ValueError(f"{path}:{line_number} has no 'step' field; is this a hybridrl/verl metrics file?")
            by_step.setdefault(int(record.pop("step")), {}).update(record)
    return by_step


class FileTracker:
    """Appends one JSON line per step; the file is flushed after every line so a crash loses nothing."""

    def __init__(self, local_dir: str) -> None:
        os.makedirs(local_dir, exist_ok=True)
        self.path = os.path.join(local_dir, METRICS_FILENAME)
        self._handle = open(self.path, "a", encoding="utf-8")

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self._handle.closed:
            raise RuntimeError(f"FileTracker for {self.path} is finished; build a new tracker to log again")
        self._handle.write(json.dumps(encode_record(step, metrics), allow_nan=False) + "\n")
        self._handle.flush()

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        """Append each sample as `{"step", "input", "output", "score"}` to val_generations.jsonl beside the metrics."""
        from hybridrl.logging.val_generations import records

        path = os.path.join(os.path.dirname(self.path), GENERATIONS_FILENAME)
        with open(path, "a", encoding="utf-8") as handle:
            for record in records(samples, step):
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")

    def finish(self) -> None:
        self._handle.close()
