"""benchmarks/dispatch_bench.py: the step batch has verl's keys, and a --quick run times the three call shapes
through a real 2-process local worker group."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `benchmarks` is a directory of scripts, not an installed package

from benchmarks import dispatch_bench  # noqa: E402


def test_step_batch_has_the_actor_inputs_at_the_given_shape():
    batch = dispatch_bench.step_batch(rows=4, prompt=3, response=5)
    assert len(batch) == 4 and batch["input_ids"].shape == (4, 8) and batch["advantages"].shape == (4, 5)
    assert batch["old_log_probs"].dtype.is_floating_point and not batch["responses"].dtype.is_floating_point


@pytest.mark.slow
def test_quick_run_times_each_call_shape(tmp_path):
    """In a process of its own: spawned ranks re-import the script as their main module."""
    out = tmp_path / "dispatch.json"
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "dispatch_bench.py"), "--quick", "--out", str(out)],
                         capture_output=True, text=True, timeout=300, check=True)
    report = json.loads(run.stdout)  # stdout is exactly one JSON object
    assert report == json.loads(out.read_text()) and report["ranks"] == 2
    assert set(report["calls"]) == {"gen", "ref", "update"}
    assert all(call["median_ms"] >= call["min_ms"] > 0 for call in report["calls"].values())
    assert report["calls"]["update"]["mb_back"] == 0.0 and report["calls"]["gen"]["mb_back"] > 0
