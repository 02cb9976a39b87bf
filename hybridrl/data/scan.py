"""One pass over a dataset before training: prompt token lengths (tokenized in batches) and the rows a run
would die on later (an overlong prompt under `data.truncation=error`, a row without `reward_model.ground_truth`).

Every problem is collected first and reported together, so one run of `hybridrl print-config --validate` (or the
start of `hybridrl train`) lists them all instead of the first one hours in.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

from hybridrl.data.errors import DatasetError

TOKENIZE_CHUNK = 1024  # rows per tokenizer call: the fast tokenizer batches them in Rust
EXAMPLES_SHOWN = 5

OVERLONG = "overlong"
NO_REWARD_MODEL = "no_reward_model"
NO_GROUND_TRUTH = "no_ground_truth"

FIXES: dict[str, str] = {
    OVERLONG: ("raise data.max_prompt_length, drop such rows with data.filter_overlong_prompts=True, or cut them "
               "with data.truncation=left (or right/middle)"),
    NO_REWARD_MODEL: ("each row needs a `reward_model` dict such as {'style': 'rule', 'ground_truth': '72'} (verl's "
                      "data format; `hybridrl preprocess` writes it); fix or drop these rows"),
    NO_GROUND_TRUTH: ("the reward function scores against reward_model.ground_truth; fill it in, drop these rows, or "
                      "mark model-scored rows with reward_model.style='model'"),
}
TITLES: dict[str, str] = {
    OVERLONG: "prompts longer than data.max_prompt_length={max_prompt_length} tokens (data.truncation=error)",
    NO_REWARD_MODEL: "rows without a `reward_model` dict",
    NO_GROUND_TRUTH: "rows without reward_model.ground_truth",
}


@dataclass(frozen=True)
class RowProblem:
    """One row the run could not use: its file, its row number in that file, and what is wrong with it."""

    kind: str
    file: str
    row: int
    detail: str


def prompt_lengths(texts: Sequence[str], tokenizer: Any) -> list[int]:
    """Token counts of the rendered prompts (no special tokens added, as the dataset tokenizes them)."""
    lengths: list[int] = []
    for start in range(0, len(texts), TOKENIZE_CHUNK):
        chunk = list(texts[start:start + TOKENIZE_CHUNK])
        lengths.extend(len(ids) for ids in tokenizer(chunk, add_special_tokens=False)["input_ids"])
    return lengths


def reward_problem(row: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, detail) when the row cannot be scored by a reward function, else None."""
    info = row.get("reward_model")
    if not isinstance(info, dict):
        return NO_REWARD_MODEL, f"reward_model is {info!r}"
    if info.get("style") == "model":  # scored by a reward model: no ground truth needed
        return None
    if info.get("ground_truth") is None:
        return NO_GROUND_TRUTH, f"reward_model is {info!r}"
    return None


def raise_for_problems(problems: list[RowProblem], num_rows: int, **title_fields: Any) -> None:
    """One DatasetError listing every kind of problem: how many rows, the first few of them, and the fix."""
    if not problems:
        return
    by_kind: dict[str, list[RowProblem]] = defaultdict(list)
    for problem in problems:
        by_kind[problem.kind].append(problem)
    sections = []
    for kind, rows in by_kind.items():
        examples = "\n".join(f"    {p.file}: row {p.row}: {p.detail}" for p in rows[:EXAMPLES_SHOWN])
        more = f"\n    ... and {len(rows) - EXAMPLES_SHOWN} more" if len(rows) > EXAMPLES_SHOWN else ""
        title = TITLES[kind].format(**title_fields)
        sections.append(f"  {len(rows)} of {num_rows} {title}:\n{examples}{more}\n  fix: {FIXES[kind]}")
    raise DatasetError("the data has rows the run cannot use:\n" + "\n".join(sections))
