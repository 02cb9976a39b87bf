"""The quickstart task: "23+45=" → "68", as verl-schema rows (data_source "arithmetic", exact-match reward).

Prompts in one set are distinct; `exclude` (or `make_arithmetic_splits`) keeps test prompts out of train.
"""

from __future__ import annotations

import operator
import random
from pathlib import Path
from typing import Any, Callable

from hybridrl.data.parquet import write_parquet

DATA_SOURCE = "arithmetic"
OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def make_row(prompt: str, answer: int | str, split: str, index: int, data_source: str = DATA_SOURCE,
             ability: str = "math") -> dict[str, Any]:
    """One verl-schema row of a procedural task with an exact-match ground truth."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": prompt}],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": str(answer)},
        "extra_info": {"split": split, "index": index},
    }


def make_arithmetic_rows(num_rows: int, seed: int, max_operand: int = 99, ops: str = "+", split: str = "train",
                         exclude: set[str] | None = None) -> list[dict[str, Any]]:
    """`num_rows` distinct problems "a{op}b=" with 0 <= a, b <= max_operand, none of whose prompts is in `exclude`."""
    ops = "".join(dict.fromkeys(ops))
    unknown = set(ops) - set(OPERATORS)
    if not ops or unknown:
        raise ValueError(f"ops={ops!r}: use a string of operators from {''.join(OPERATORS)!r}")
    exclude = exclude or set()
    num_possible = (max_operand + 1) ** 2 * len(ops)
    num_excluded = sum(_is_possible_prompt(prompt, max_operand, ops) for prompt in exclude)
    if num_rows > num_possible - num_excluded:
        raise ValueError(f"cannot make {num_rows} distinct {ops!r} problems with operands up to {max_operand} "
                         f"({num_possible} exist, {num_excluded} excluded); raise max_operand or add ops")

    def draw(rng: random.Random) -> tuple[str, int]:
        a, b, op = rng.randint(0, max_operand), rng.randint(0, max_operand), rng.choice(ops)
        return f"{a}{op}{b}=", OPERATORS[op](a, b)

    return [make_row(prompt, answer, split, i) for i, (prompt, answer) in
            enumerate(draw_distinct(num_rows, seed, draw, exclude))]


def draw_distinct(num_rows: int, seed: int, draw: Callable[[random.Random], tuple[str, Any]],
                  exclude: set[str]) -> list[tuple[str, Any]]:
    """`num_rows` (prompt, answer) pairs from `draw` with distinct prompts, none in `exclude` (seeded).

    The caller checks that enough distinct prompts exist, or this loops forever.
    """
    rng = random.Random(seed)
    seen: set[str] = set()
    pairs = []
    while len(pairs) < num_rows:
        prompt, answer = draw(rng)
        if prompt in seen or prompt in exclude:
            continue
        seen.add(prompt)
        pairs.append((prompt, answer))
    return pairs


def _is_possible_prompt(prompt: str, max_operand: int, ops: str) -> bool:
    """Whether these settings can produce `prompt` (so excluding it shrinks the pool)."""
    for op in ops:
        left, sep, right = prompt.removesuffix("=").partition(op)
        if sep and left.isdigit() and right.isdigit():
            return int(left) <= max_operand and int(right) <= max_operand
    return False


def prompt_text(row: dict[str, Any]) -> str:
    return row["prompt"][0]["content"]


def make_arithmetic_splits(num_train: int, num_test: int, seed: int, max_operand: int = 99,
                           ops: str = "+") -> tuple[list[dict], list[dict]]:
    """Train and test rows with no prompt in common (test drawn first, then excluded from train)."""
    test = make_arithmetic_rows(num_test, seed + 1, max_operand, ops, split="test")
    train = make_arithmetic_rows(num_train, seed, max_operand, ops, split="train",
                                 exclude={prompt_text(row) for row in test})
    return train, test


def write_arithmetic_dataset(save_dir: str | Path, num_train: int = 1024, num_test: int = 128, seed: int = 0,
                             max_operand: int = 99, ops: str = "+") -> dict[str, Path]:
    """Write `{save_dir}/train.parquet` and `test.parquet` for the quickstart; returns the two paths."""
    train, test = make_arithmetic_splits(num_train, num_test, seed, max_operand, ops)
    save_dir = Path(save_dir).expanduser()
    return {"train": write_parquet(train, save_dir / "train.parquet"),
            "test": write_parquet(test, save_dir / "test.parquet")}
