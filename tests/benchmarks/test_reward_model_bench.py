"""benchmarks/reward_model_bench.py at --quick size (a real reward model loaded from disk, scored on the CPU)."""

from __future__ import annotations

from tests.benchmarks.quick_run import quick_report  # puts the repository on sys.path for `benchmarks`

from benchmarks import reward_model_bench  # noqa: E402


def test_quick_run_reports_the_cpu_rate(tmp_path, capsys):
    report = quick_report(reward_model_bench.main, tmp_path / "reward_model.json", capsys)
    assert report["cpu"]["rows"] == 8 and report["cpu"]["rows_per_s"] > 0
    assert len(report["cpu"]["score_s_all"]) == 3 and "cuda" not in report
