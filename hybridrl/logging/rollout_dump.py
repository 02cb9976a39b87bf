"""verl's `trainer.rollout_data_dir`: one `<step>.jsonl` per step, one JSON object per generated sample."""

from __future__ import annotations

import json
import os
from typing import Any


def _jsonable(value: Any) -> Any:
    # numpy scalars/arrays and torch tensors all offer .tolist(); anything else is a caller bug worth naming
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"rollout dump: {type(value).__name__} is not JSON-serializable; convert it to str/number/list first")


def dump_rollout_jsonl(out_dir: str, step: int, prompts: list[str], responses: list[str], scores: list[float],
                       extra: dict[str, list] | None = None) -> str:
    """Write `<out_dir>/<step>.jsonl` with `input`, `output`, `score`, `step` and each `extra` key; returns the path.

    Every list must have one entry per sample. Extra values must be JSON-serializable; tensors and numpy values are converted via .tolist().
    """
    extra = extra or {}
    lengths = {"prompts": len(prompts), "responses": len(responses), "scores": len(scores)}
    lengths.update({f"extra[{key!r}]": len(values) for key, values in extra.items()})
    if len(set(lengths.values())) > 1:
        raise ValueError(f"dump_rollout_jsonl needs one entry per sample in every list, got lengths {lengths}")
    reserved = {"input", "output", "score", "step"} & set(extra)
    if reserved:
        raise ValueError(f"extra keys {sorted(reserved)} clash with the fixed fields input/output/score/step; rename them")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{step}.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        for index, (prompt, response, score) in enumerate(zip(prompts, responses, scores)):
            record: dict[str, Any] = {"input": prompt, "output": response, "score": float(score), "step": step}
            record.update({key: values[index] for key, values in extra.items()})
            handle.write(json.dumps(record, ensure_ascii=False, default=_jsonable) + "\n")
    return path
