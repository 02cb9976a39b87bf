"""The reward-function file the reward-manager tests load."""

from __future__ import annotations

import pytest


@pytest.fixture
def reward_file(tmp_path):
    """A file with a row-wise function (dict result), a batched one, a slow one and one that raises."""
    path = tmp_path / "reward.py"
    path.write_text(
        "import time\n"
        "def row(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):\n"
        "    return {'score': float(solution_str == ground_truth) + bonus, 'pred': solution_str}\n"
        "def batched(data_sources, solution_strs, ground_truths, extra_infos, scale=1.0):\n"
        "    return [scale * float(s == g) for s, g in zip(solution_strs, ground_truths)]\n"
        "def short(data_sources, solution_strs, ground_truths, extra_infos):\n"
        "    return [1.0]\n"
        "def slow(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if solution_str == 'hang':\n"
        "        time.sleep(60)\n"
        "    return float(solution_str == ground_truth)\n"
        "def boom(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    raise ValueError('bad row')\n")
    return str(path)
