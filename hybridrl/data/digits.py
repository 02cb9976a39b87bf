"""The quickstart task: reverse a string of digits ("4821=" → "1284"), as verl-schema rows.

A procedural task with an exact checker that a tiny model can learn on a CPU in minutes, so the
quickstart shows RL improving a policy rather than a benchmark score. Exact-match reward.
"""

from __future__ import annotations

import random
from typing import Any

from hybridrl.data.arithmetic import draw_distinct, make_row

DATA_SOURCE = "digits/reverse"


def make_reverse_rows(num_rows: int, seed: int, num_digits: int = 4, split: str = "train",
                      exclude: set[str] | None = None) -> list[dict[str, Any]]:
    """`num_rows` distinct prompts "<digits>=" whose ground truth is the digits reversed."""
    exclude = exclude or set()
    if num_rows > 10 ** num_digits - len(exclude):
        raise ValueError(f"cannot make {num_rows} distinct {num_digits}-digit prompts with {len(exclude)} excluded; "
                         f"raise num_digits")

    def draw(rng: random.Random) -> tuple[str, str]:
        digits = "".join(rng.choice("0123456789") for _ in range(num_digits))
        return f"{digits}=", digits[::-1]

    return [make_row(prompt, answer, split, i, data_source=DATA_SOURCE, ability="string")
            for i, (prompt, answer) in enumerate(draw_distinct(num_rows, seed, draw, exclude))]
