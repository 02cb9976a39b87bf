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
    assert row.startswith(f"| quick | {gaps['engine_before__trainer_before']:.4f} | {gaps['engine_after__trainer_after']:.4f} |")
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
