"""build_trackers: JSONL file logger (append on resume, non-finite values), name validation, install hints."""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest
import torch

from hybridrl.logging.backends import MissingDependencyError
from hybridrl.logging.file_tracker import read_metrics_jsonl
from hybridrl.logging.tracker import build_trackers, check_trackers_available


def _build(names, tmp_path):
    return build_trackers(names, project_name="p", experiment_name="e", local_dir=str(tmp_path), config_dict={})


def test_file_tracker_appends_across_sessions(tmp_path):
    first = _build(["file"], tmp_path)
    first.log({"critic/score/mean": torch.tensor(0.25), "training/global_step": 1}, step=1)
    first.log({"critic/score/mean": np.float64(0.5), "training/global_step": 2}, step=2)
    first.finish()
    resumed = _build("file", tmp_path)  # a bare string works like a one-item list
    resumed.log({"critic/score/mean": 0.75, "training/global_step": 3}, step=3)
    resumed.finish()

    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 1, "critic/score/mean": 0.25, "training/global_step": 1},
        {"step": 2, "critic/score/mean": 0.5, "training/global_step": 2},
        {"step": 3, "critic/score/mean": 0.75, "training/global_step": 3},
    ]


def test_nonfinite_values_become_null_and_are_listed(tmp_path):
    tracker = _build(["file"], tmp_path)
    tracker.log({"actor/pg_loss": math.nan, "actor/grad_norm": math.inf, "actor/entropy": 1.5}, step=4)
    tracker.finish()
    line = (tmp_path / "metrics.jsonl").read_text()
    assert "NaN" not in line and "Infinity" not in line  # strict JSON
    record = json.loads(line)
    assert record["actor/pg_loss"] is None and record["actor/grad_norm"] is None
    assert sorted(record["_nonfinite"]) == ["actor/grad_norm", "actor/pg_loss"]
    decoded = read_metrics_jsonl(str(tmp_path / "metrics.jsonl"))[4]
    assert math.isnan(decoded["actor/pg_loss"]) and decoded["actor/entropy"] == 1.5


def test_console_and_file_together(tmp_path, capsys):
    tracker = _build(["console", "file"], tmp_path)
    tracker.log({"critic/score/mean": 1.0}, step=1)
    tracker.finish()
    assert capsys.readouterr().out.startswith("step:1 | reward score 1.000")
    assert (tmp_path / "metrics.jsonl").exists()


def test_unknown_logger_lists_valid_names(tmp_path):
    with pytest.raises(ValueError, match="unknown logger 'wandbb'.*'console'.*'swanlab'"):
        _build(["console", "wandbb"], tmp_path)
    with pytest.raises(ValueError, match="does not implement"):
        check_trackers_available(["clearml"])


def test_non_numeric_metric_names_the_key(tmp_path):
    tracker = _build(["console"], tmp_path)
    with pytest.raises(TypeError, match="actor/note"):
        tracker.log({"actor/note": "hello"}, step=1)


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_missing_wandb_gives_install_hint():
    with pytest.raises(MissingDependencyError, match=r"pip install 'hybridrl\[wandb\]'"):
        check_trackers_available(["console", "wandb"])


def test_tensorboard_writes_event_files(tmp_path):
    if importlib.util.find_spec("tensorboard") is None and importlib.util.find_spec("tensorboardX") is None:
        pytest.skip("neither tensorboard nor tensorboardX is installed")
    tracker = _build(["tensorboard"], tmp_path)
    tracker.log({"critic/score/mean": 0.5, "val-core/openai/gsm8k/reward/mean@1": 0.1}, step=1)
    tracker.finish()
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
