"""`hybridrl plot`: PNG from a real metrics.jsonl, default key choice, missing-key error with suggestions."""

from __future__ import annotations

import math

import pytest

from hybridrl.logging.plot import main_plot, plot_metrics, select_keys, smooth_values
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
    assert select_keys(available, None) == ["critic/score/mean", "actor/pg_loss", "val-core/a/reward/mean@1"]


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
