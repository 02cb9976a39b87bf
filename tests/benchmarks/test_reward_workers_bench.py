"""benchmarks/reward_workers_bench.py at --quick size (a real scoring thread and real worker processes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `benchmarks` is a directory of scripts, not an installed package

from benchmarks import reward_workers_bench  # noqa: E402


def test_quick_run_reports_both_ways_of_scoring(tmp_path, capsys):
    out = tmp_path / "reward_workers.json"
    reward_workers_bench.main(["--quick", "--out", str(out)])
    report = json.loads(capsys.readouterr().out)  # stdout is exactly one JSON object
    assert report == json.loads(out.read_text())
    assert report["alone"]["main_thread_ops_per_s"] > 0
    for condition in ("in_process_thread", "pool_2_workers"):
        assert report[condition]["score_s"] > 0 and report[condition]["main_thread_ops_per_s"] > 0
    assert sys.getswitchinterval() == 0.005  # restored once the submitted scorings finished
