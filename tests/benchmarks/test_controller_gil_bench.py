"""benchmarks/controller_gil_bench.py at --quick size on CPU (2 real rank processes, a real decode thread)."""

from __future__ import annotations

import sys

import pytest

from tests.benchmarks.quick_run import quick_report  # puts the repository on sys.path for `benchmarks`

from benchmarks import controller_gil_bench  # noqa: E402


@pytest.mark.slow
def test_quick_run_reports_each_condition(tmp_path, capsys):
    report = quick_report(controller_gil_bench.main, tmp_path / "gil.json", capsys)
    for condition in ("alone", "beside_decode_thread", "beside_decode_thread_responsive",
                      "beside_reward_decode_responsive"):
        assert 0 < report[condition]["min_ms"] <= report[condition]["median_ms"] <= report[condition]["max_ms"]
    assert report["shapes"]["ranks"] == 2 and report["decode_alone_ms"] > 0 and report["reward_decode_alone_ms"] > 0
    assert sys.getswitchinterval() == 0.005  # restored once the responsive decodes finished
