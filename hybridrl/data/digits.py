"""The quickstart task: reverse a string of digits ("4821=" → "1284"), as verl-schema rows.

A procedural task with an exact checker that a tiny model can learn on a CPU in minutes, so the
quickstart shows RL improving a policy rather than a benchmark score. Exact-match reward.
"""

from __future__ import annotations

import random
from typing import Any

DATA_SOURCE = "digits/reverse"


def make_reverse_rows(num_rows: int, seed: int, num_digits: int = 4, split: str = "train",
                      exclude: set[str] | None = None) -> list[dict[str, Any]]:
    """`num_rows` distinct prompts "<digits>=" whose ground truth is the digits reversed."""
    exclude = exclude or set()
    if num_rows > 10 ** num_digits - len(exclude):
        raise ValueError(f"cannot make {num_rows} distinct {num_digits}-digit prompts with {len(exclude)} excluded; "
                         f"raise num_digits")
    rng = random.Random(seed)
    seen: set[str] = set()
    rows = []
    while len(rows) < num_rows:
        digits = "".join(rng.choice("0123456789") for _ in range(num_digits))
        prompt = f"{digits}="
        if prompt in seen or prompt in exclude:
            continue
        seen.add(prompt)
        rows.append({"data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": prompt}], "ability": "string",
                     "reward_model": {"style": "rule", "ground_truth": digits[::-1]},
                     "extra_info": {"split": split, "index": len(rows)}})
    return rows
