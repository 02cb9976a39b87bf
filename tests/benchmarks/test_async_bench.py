"""benchmarks/async_bench.py at --quick size on CPU: the trainers run on the long-tail workload, one JSON out."""

from __future__ import annotations

import json

import pytest
import torch

from tests.benchmarks.quick_run import quick_report

from benchmarks import async_bench  # noqa: E402  (quick_run puts the repository on sys.path)


def test_quick_run_compares_colocate_async_with_sync(tmp_path, capsys):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # toy matmuls: thread sync costs more than it buys on shared CPUs
    try:
        report = quick_report(async_bench.main, tmp_path / "async.json", capsys, "--steps", "1",
                              "--max-response-length", "12", "--workdir", str(tmp_path),
                              "--modes", "sync,colocate_async,colocate_async_kept_kv")
    finally:
        torch.set_num_threads(threads)
    assert "random stop ids" in report["workload"]["emulation"]
    sync, colocated, kept = (report["runs"][m] for m in ("sync", "colocate_async", "colocate_async_kept_kv"))
    for run in (sync, colocated, kept):
        assert run["steady_steps"] == [2] and len(run["step_s_all"]) == 2 and run["tokens_per_s"] > 0
        assert run["phases_s"]["gen"] > 0 and run["phases_s"]["update_actor"] > 0
        assert 1 <= run["response_length/max"] <= 12  # stopped by the emulated EOS or the cap
    assert "training/off_policy/trajectory_staleness/mean" in colocated
    assert "training/off_policy/trajectory_staleness/mean" not in sync
    ratio = report["comparison"]["async_over_sync_tokens_per_s"]
    assert ratio == colocated["tokens_per_s"] / sync["tokens_per_s"]
    json.dumps(report)  # plain JSON throughout
    async_bench.main(["--table", str(tmp_path / "async.json")])
    rows = capsys.readouterr().out.strip().splitlines()[2:]
    assert [row.split(" | ")[1] for row in rows] == ["sync", "colocate_async", "colocate_async_kept_kv"]
    late = report["comparison"]["async_over_sync_tokens_per_s_last_half"]
    assert late == colocated["tokens_per_s_last_half"] / sync["tokens_per_s_last_half"]
    generated = report["comparison"]["async_over_sync_generated_tokens_per_s_last_half"]
    assert generated == colocated["generated_tokens_per_s_last_half"] / sync["generated_tokens_per_s_last_half"]
    assert rows[1].endswith(f"| {ratio:.2f} ({report['comparison']['async_over_sync_tokens_per_s_median']:.2f}) | "
                            f"{late:.2f} | {generated:.2f} |")
    kept_ratio = report["comparison"]["kept_kv_over_sync_tokens_per_s"]
    assert kept_ratio == kept["tokens_per_s"] / sync["tokens_per_s"] and rows[2].endswith(
        f"| {kept_ratio:.2f} ({report['comparison']['kept_kv_over_sync_tokens_per_s_median']:.2f}) | "
        f"{report['comparison']['kept_kv_over_sync_tokens_per_s_last_half']:.2f} | "
        f"{report['comparison']['kept_kv_over_sync_generated_tokens_per_s_last_half']:.2f} |")
    # sync trains what it generated that step: its responses' tokens are all of its generated tokens
    num_rows = report["workload"]["num_prompts"] * report["workload"]["n"]
    responses = [round(mean * num_rows) for mean in sync["per_step"]["response_length/mean"]]
    assert sync["per_step"]["rollout/num_generated_tokens"] == responses and min(responses) > 0


def test_the_later_half_is_the_plateau_and_older_reports_show_a_dash():
    steps = [{"perf/total_num_tokens": tokens, "timing_s/step": seconds}
             for tokens, seconds in ((100, 1.0), (100, 2.0), (300, 3.0), (100, 1.0), (200, 4.0))]
    trained = async_bench.TRAINED
    assert async_bench.later_half_per_s(steps, trained) == 600 / 8.0  # the last three (the odd middle one with them)
    assert async_bench.later_half_per_s(steps[:1], trained) == 100.0
    old = {"sync": {"tokens_per_s": 1.0, "tokens_per_s_median": 1.0},
           "colocate_async": {"tokens_per_s": 2.0, "tokens_per_s_median": 2.0}}
    assert "async_over_sync_tokens_per_s_last_half" not in async_bench.comparison(old)
    assert async_bench._late_ratio_cell(async_bench.comparison(old), "colocate_async") == "-"


@pytest.mark.slow  # two two-rank trainers (25 s); separate_async itself is in the default suite (test_async_trainer.py)
def test_quick_split_pair_trains_on_one_rank_and_generates_on_the_other(tmp_path, capsys):
    """--modes sync_split,separate_async: the actor on CPU rank 0, the rollout on rank 1, for both trainers; the
    separate_async run reports its staleness and idle ratios, and the comparison divides the two."""
    report = quick_report(async_bench.main, tmp_path / "split.json", capsys, "--steps", "1", "--max-response-length",
                          "12", "--modes", "sync_split,separate_async", "--workdir", str(tmp_path))
    split, separate = report["runs"]["sync_split"], report["runs"]["separate_async"]
    assert split["tokens_per_s"] > 0 and separate["tokens_per_s"] > 0
    assert separate["training/off_policy/trajectory_staleness_worst/max"] <= 1.0  # one step off at most
    assert 0.0 <= separate["fully_async/rollouter/idle_ratio"] <= 1.0
    assert "fully_async/rollouter/idle_ratio" not in split
    ratio = report["comparison"]["separate_over_sync_tokens_per_s"]
    assert ratio == separate["tokens_per_s"] / split["tokens_per_s"]
    assert "async_over_sync_tokens_per_s" not in report["comparison"]
