"""benchmarks/trainer_length_probe.py at --quick size on CPU: every row length is timed, body and attention."""

from __future__ import annotations

import pytest

from tests.benchmarks.quick_run import quick_report

from benchmarks import trainer_length_probe as probe  # noqa: E402  (quick_run puts the repository on sys.path)


def test_quick_run_times_each_length_at_the_same_token_count(tmp_path, capsys):
    report = quick_report(probe.main, tmp_path / "probe.json", capsys)
    assert report["workload"]["tokens"] == 256 and set(report["lengths"]) == {"32", "128"}
    for length, timings in report["lengths"].items():
        assert timings["rows"] * int(length) == 256
        assert timings["body_forward_backward_s"] > 0 and timings["body_forward_s"] > 0
        assert timings["body_forward_us_per_token"] == pytest.approx(timings["body_forward_s"] / 256 * 1e6)
        assert timings["sdpa_s"] > 0
        forced = timings["sdpa_forced_s"]
        assert set(forced) == set(probe.BACKENDS)
        assert isinstance(forced["MATH"], float)  # the math backend takes anything
        assert all(isinstance(value, float) and value > 0 or isinstance(value, str) and value for value in forced.values())


def test_lengths_must_fit_the_token_count():
    with pytest.raises(SystemExit):
        probe.parse_args(["--quick", "--lengths", "512"])
