"""benchmarks/multiturn_bench.py at --quick size on CPU (the H200 run is in benchmarks/README.md)."""

from __future__ import annotations

from tests.benchmarks.quick_run import quick_report  # puts the repository on sys.path for `benchmarks`

from benchmarks import multiturn_bench  # noqa: E402


def test_quick_run_compares_multi_and_single_turn_on_the_same_tokens(tmp_path, capsys):
    report = quick_report(multiturn_bench.main, tmp_path / "multiturn.json", capsys, "--device", "cpu",
                          "--decode-bursts", "8,4")
    assert set(report["runs"]) == {"burst_8", "burst_4"}
    for run in report["runs"].values():
        multi, single = run["multi_turn"], run["single_turn"]
        assert multi["generated_tokens"] == single["generated_tokens"] > 0  # the same tokens per trajectory
        assert multi["num_trajectories"] == single["num_trajectories"] == 4 * 2
        assert multi["tool_calls"] > 0 and multi["turns"]["max"] <= 5 and single["turns"]["max"] == 1
        # later turns extend earlier ones: their KV comes from the prefix cache
        assert multi["metrics"]["rollout/prefix_cache_hit_tokens"] > single["metrics"]["rollout/prefix_cache_hit_tokens"]
        assert run["multi_over_single"] > 0 and set(run["warmup"]) == {"multi_turn", "single_turn"}
    assert report["multi_over_single"] == report["runs"]["burst_8"]["multi_over_best_single"]
    assert report["goal"] == 0.8 and isinstance(report["meets_goal"], bool)


def test_repeats_host_timeline_and_the_table(tmp_path, capsys):
    """--repeats reports the median pair with every wall; --host-timeline the engine's host seconds per side;
    --table prints one markdown row per engine from the JSON."""
    out = tmp_path / "multiturn.json"
    report = quick_report(multiturn_bench.main, out, capsys, "--device", "cpu", "--decode-bursts", "16",
                          "--repeats", "2", "--host-timeline")
    multi = report["runs"]["burst_16"]["multi_turn"]
    assert len(multi["wall_s_repeats"]) == 2 and multi["wall_s"] == min(multi["wall_s_repeats"])
    timeline = multi["host_timeline"]
    assert timeline["LLMEngine.step"]["calls"] > 0 and timeline["LLMEngine.make_request"]["calls"] >= 8
    assert timeline["engine thread waits between steps"]["s"] >= 0
    multiturn_bench.main(["--table", str(out)])
    table = capsys.readouterr().out.strip().splitlines()
    assert table[0].startswith("| engine |") and len(table) == 3 and table[2].startswith("| burst_16 | ")
