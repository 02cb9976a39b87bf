"""benchmarks/mismatch_bench.py: a --quick CPU run reports both numerics side by side, with verl's metrics."""

from __future__ import annotations

import pytest

from tests.benchmarks.quick_run import quick_report  # puts the repository on sys.path for `benchmarks`

from benchmarks import mismatch_bench  # noqa: E402

PAIRS = {f"engine_{engine}__trainer_{trainer}" for engine in ("before", "after") for trainer in ("before", "after")}


def test_quick_run_reports_the_gap_and_decode_time_of_both_numerics(tmp_path, capsys):
    report = quick_report(mismatch_bench.main, tmp_path / "mismatch.json", capsys, "--repeats", "1", "--sweep")
    shape = report["shapes"]["quick"]
    assert set(shape["engine_vs_trainer"]) == PAIRS
    for metrics in shape["engine_vs_trainer"].values():
        assert metrics["training/rollout_log_probs_diff_max"] >= metrics["training/rollout_log_probs_diff_mean"] > 0
        assert {"rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/chi2_token",
                "rollout_corr/log_ppl_abs_diff"} <= set(metrics)
    gaps = {name: metrics["training/rollout_log_probs_diff_mean"] for name, metrics in shape["engine_vs_trainer"].items()}
    assert shape["log_probs_diff_mean"] == {"before": gaps["engine_before__trainer_before"],
                                            "after": gaps["engine_after__trainer_after"]}
    # each side's numerics matter: a rollout scored by the other numerics is further off than by its own
    assert gaps["engine_after__trainer_before"] > gaps["engine_after__trainer_after"]
    assert gaps["engine_before__trainer_after"] > gaps["engine_before__trainer_before"]
    assert all(step > 0 for step in shape["decode_step_s"].values())
    assert shape["after_over_before"]["decode_step_s"] == pytest.approx(
        shape["decode_step_s"]["after"] / shape["decode_step_s"]["before"])
    reference = shape["vs_fp32_reference"]
    sides = {"engine_after", "trainer_after", "trainer_before"} | {
        f"trainer_after_fp32_{family}" for family in mismatch_bench.FP32_FAMILIES}
    assert set(reference) == sides | {"forward_s"}
    assert all(reference[side] > 0 for side in sides)
    # an fp32 module changes the trainer's log-probs: the sweep really ran each family in fp32
    assert all(reference[f"trainer_after_fp32_{family}"] != reference["trainer_after"]
               for family in ("attention", "mlp"))
    mismatch_bench.main(["--table", str(tmp_path / "mismatch.json")])
    row = capsys.readouterr().out.strip().splitlines()[2]
    assert row.startswith(f"| quick, 4 x 2 | {gaps['engine_before__trainer_before']:.4f} | {gaps['engine_after__trainer_after']:.4f} |")
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert len(cells) == 12 and cells[3] == "-" and "-" not in cells[4:10]  # every sweep column filled; no
    assert cells[10].endswith("/ -") and cells[11].endswith("/ -")  # batch-invariant engine on CPU
    assert report["workload"]["num_prompts"] == 4 and report["workload"]["response_length"] == 8


def test_workload_must_split_into_micro_batches():
    with pytest.raises(SystemExit):
        mismatch_bench.parse_args(["--quick", "--micro-batch", "3"])


def test_sweep_needs_the_reference():
    with pytest.raises(SystemExit):
        mismatch_bench.parse_args(["--quick", "--sweep", "--skip-reference"])


def test_the_families_table_comes_from_the_reports_sweep():
    """`--invariant-families` (a CUDA run): its second table, one row per shape, each cell from the report."""
    pairs = {f"engine_after__trainer_{t}": {"training/rollout_log_probs_diff_mean": gap}
             for t, gap in (("after", 0.0057), ("invariant", 0.0037))}
    families = {family: {"log_probs_diff_mean": 0.001 * (i + 1), "trainer_forward_s": 1.0}
                for i, family in enumerate(mismatch_bench.INVARIANT_FAMILIES)}
    families["engine_attention"] = {"decode_step_s": 0.002315, "prefill_time_s": 0.03, **{
        side: {"log_probs_diff_mean": gap, "trainer_forward_s": 1.0}
        for side, gap in (("trainer_after", 0.0058), ("trainer_attention", 0.0043), ("trainer_invariant", 0.0))}}
    shape = {"log_probs_diff_mean": {"before": 0.0091, "after": 0.0057, "invariant": 0.0},
             "decode_step_s": {"before": 0.0022, "after": 0.00223, "invariant": 0.0035},
             "trainer_forward_s": {"after": 0.64, "invariant": 0.87}, "engine_vs_trainer": pairs,
             "invariant_families": families}
    report = {"workload": {"num_prompts": 64, "n": 8}, "shapes": {"0.5b": shape}}
    tables = mismatch_bench.markdown_table([report]).split("\n\n")
    assert len(tables) == 2
    row = tables[1].splitlines()[2]
    assert row == ("| 0.5b, 64 x 8 | 0.0057 | 0.0010 | 0.0020 | 0.0030 | 0.0040 | 0.0037 | 2.315 (2.230) | 0.0058 "
                   "| 0.0043 | 0.0000 |")
    del shape["invariant_families"]
    assert "\n\n" not in mismatch_bench.markdown_table([report])  # no sweep, no second table
