"""benchmarks/update_path_bench.py: the micro-batch has the left-padded layout, and a --quick CPU run times
every precision path (FSDP2 over a 1-rank gloo group included)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `benchmarks` is a directory of scripts, not an installed package

from benchmarks import update_path_bench  # noqa: E402


def test_micro_batch_is_left_padded_with_positions_from_the_first_token():
    import torch

    batch = update_path_bench.micro_batch(rows=5, prompt=10, response=4, device=torch.device("cpu"))
    mask = batch["attention_mask"]
    assert mask.shape == (5, 14) and bool(mask[0].all())  # the first row holds the longest prompt
    assert bool((mask[:, 10:] == 1).all())  # responses are never padded
    for row in range(5):
        pads = int((mask[row] == 0).sum())
        assert bool((mask[row, :pads] == 0).all()) and 0 <= pads <= 5  # prompts of 5..10 tokens, padded left
        assert batch["position_ids"][row, pads:].tolist() == list(range(14 - pads))


@pytest.mark.slow  # benchmark plumbing: a 1-rank gloo group per precision path (~13 s on 2 cores)
def test_quick_run_times_each_precision_path(tmp_path):
    """In a process of its own: the run starts (and ends) a process group, which must not outlive it here."""
    out = tmp_path / "update_path.json"
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "update_path_bench.py"), "--quick", "--iters", "1",
                          "--out", str(out)], capture_output=True, text=True, timeout=300, check=True)
    report = json.loads(run.stdout)  # stdout is exactly one JSON object
    assert report == json.loads(out.read_text())
    assert set(report["paths"]) == {"autocast", "fsdp", "bf16"}
    assert all(path["wall_ms"] > 0 and "device_ms" not in path for path in report["paths"].values())
