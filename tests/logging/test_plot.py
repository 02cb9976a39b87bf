"""`hybridrl plot`: PNG from a real metrics.jsonl, default key choice, missing-key error with suggestions."""

from __future__ import annotations

import math

import pytest

from hybridrl.logging.file_tracker import read_metrics_jsonl
from hybridrl.logging.plot import _panels, main_plot, plot_metrics, select_keys, smooth_values
from hybridrl.logging.tracker import build_trackers

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture()
def metrics_file(tmp_path) -> str:
    tracker = build_trackers(["file"], project_name="p", experiment_name="e", local_dir=str(tmp_path), config_dict={})
    for step in range(1, 7):
        metrics = {"critic/score/mean": step / 6, "actor/pg_loss": math.nan if step == 3 else -0.1 * step,
                   "response_length/mean": 20.0 + step, "timing_s/step": 1.0}
        if step % 3 == 0:  # validation only every few steps, as with trainer.test_freq
            metrics["val-core/openai/gsm8k/reward/mean@1"] = 0.1 * step
        tracker.log(metrics, step=step)
    tracker.finish()
    return str(tmp_path / "metrics.jsonl")


def test_plot_writes_png_with_default_keys(metrics_file, tmp_path):
    out = plot_metrics(metrics_file, None, str(tmp_path / "curves.png"), smooth=2)
    with open(out, "rb") as handle:
        assert handle.read(8) == PNG_MAGIC


def test_default_keys_are_present_curves_plus_val_core():
    available = ["actor/pg_loss", "critic/score/mean", "timing_s/step", "val-core/a/reward/mean@1"]
    assert select_keys(available, None) == ["critic/score/mean", "val-core/a/reward/mean@1", "actor/pg_loss"]


def test_missing_key_lists_closest_first(metrics_file, tmp_path):
    with pytest.raises(ValueError, match=r"'critic/score/mena'.*closest first\): critic/score/mean, "):
        plot_metrics(metrics_file, ["critic/score/mena"], str(tmp_path / "x.png"))


def test_main_plot_cli(metrics_file, tmp_path, capsys):
    out = tmp_path / "c.png"
    assert main_plot([metrics_file, "--keys", "timing_s/step", "actor/pg_loss", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert main_plot([metrics_file, "--keys", "nope", "-o", str(out)]) == 1
    assert "hybridrl plot: error: metric 'nope'" in capsys.readouterr().err


def test_smooth_values_skips_nonfinite():
    smoothed = smooth_values([1.0, math.nan, 3.0, 5.0], 2)
    assert smoothed[:3] == [1.0, 1.0, 3.0] and smoothed[3] == 4.0


def _write_run(folder, critic: bool) -> str:
    tracker = build_trackers(["file"], project_name="p", experiment_name="e", local_dir=str(folder), config_dict={})
    for step in range(1, 5):
        metrics = {"critic/score/mean": 0.1 * step, "actor/ppo_kl": 0.01, "actor/kl_loss": 0.002,
                   "response_length/mean": 30.0, "timing_s/step": 2.0, "timing_s/gen": 1.0, "timing_s/update_actor": 0.7}
        if critic:
            metrics.update({"critic/vf_loss": 1.0 / step, "critic/vf_explained_var": 0.2 * step,
                            "timing_s/update_critic": 0.2})
        tracker.log(metrics, step=step)
    tracker.finish()
    return str(folder / "metrics.jsonl")


def test_ppo_panels_add_value_loss_explained_variance_kl_and_stacked_timing(tmp_path):
    ppo = _write_run(tmp_path / "ppo", critic=True)
    runs = [("ppo", read_metrics_jsonl(ppo))]
    assert _panels(runs, None, timing=True) == [
        ("curve", "critic/score/mean"), ("curve", "response_length/mean"), ("curve", "actor/kl_loss"),
        ("curve", "actor/ppo_kl"), ("curve", "critic/vf_loss"), ("curve", "critic/vf_explained_var"),
        ("timing", runs[0])]
    grpo = _write_run(tmp_path / "grpo", critic=False)
    assert ("curve", "critic/vf_loss") not in _panels([("grpo", read_metrics_jsonl(grpo))], None, timing=True)


def test_compare_runs_into_a_folder_that_does_not_exist(tmp_path, capsys):
    ppo, grpo = _write_run(tmp_path / "ppo", critic=True), _write_run(tmp_path / "grpo", critic=False)
    out = tmp_path / "new" / "folder" / "compare.png"
    assert main_plot([ppo, grpo, "--labels", "ppo", "grpo", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert main_plot([ppo, grpo, "--labels", "only_one", "-o", str(out)]) == 1
    assert "--labels gives 1 names for 2 metrics files" in capsys.readouterr().err
