"""benchmarks/reward_workers_bench.py at --quick size (a real scoring thread and real worker processes)."""

from __future__ import annotations

import sys

from tests.benchmarks.quick_run import quick_report  # puts the repository on sys.path for `benchmarks`

from benchmarks import reward_workers_bench  # noqa: E402


def test_quick_run_reports_both_ways_of_scoring(tmp_path, capsys):
    report = quick_report(reward_workers_bench.main, tmp_path / "reward_workers.json", capsys)
    assert report["alone"]["main_thread_ops_per_s"] > 0
    for condition in ("in_process_thread", "pool_2_workers"):
        assert report[condition]["score_s"] > 0 and report[condition]["main_thread_ops_per_s"] > 0
    assert sys.getswitchinterval() == 0.005  # restored once the submitted scorings finished
