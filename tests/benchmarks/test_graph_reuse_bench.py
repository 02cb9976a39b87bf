"""benchmarks/graph_reuse_bench.py at --quick size on CPU (the GPU run is in benchmarks/README.md)."""

from __future__ import annotations

from tests.benchmarks.quick_run import quick_report  # puts the repository on sys.path for `benchmarks`

from benchmarks import graph_reuse_bench  # noqa: E402


def test_quick_run_reports_both_modes_per_workload(tmp_path, capsys):
    report = quick_report(graph_reuse_bench.main, tmp_path / "graph_reuse.json", capsys, "--device", "cpu",
                          "--rounds", "2")
    for workload in ("forced_length", "varied_length"):
        modes = report[workload]
        assert modes["same_tokens"]
        for keep in (True, False):
            mode = modes[f"keep_graphs_{keep}"]
            assert len(mode["rounds"]) == 2 and not mode["stable_address"]  # CPU: a plain tensor
            assert mode["generate_s_median"] > 0 and mode["graph_capture_s_median"] == 0.0
            assert all(r["generated_tokens"] > 0 and r["free_gb_while_asleep"] is None for r in mode["rounds"])
    forced = report["forced_length"]["keep_graphs_True"]["rounds"][0]
    assert forced["generated_tokens"] == 4 * 2 * 8  # prompts x n x forced length
