"""Progress bar silence off-TTY, rollout dumps, the library logger, and a light `import hybridrl.logging`."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
import torch

from hybridrl.logging.log import get_logger, set_verbosity
from hybridrl.logging.progress import StepProgress
from hybridrl.logging.rollout_dump import dump_rollout_jsonl


def test_progress_prints_nothing_off_tty(capsys):
    progress = StepProgress(total_steps=5, initial_step=1)  # pytest's captured stderr is not a TTY
    assert not progress.enabled
    progress.update(2, {"critic/score/mean": 0.5, "timing_s/step": 1.0})
    progress.close()
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_progress_enabled_shows_steps_and_metrics(capsys):
    progress = StepProgress(total_steps=4, initial_step=1, enabled=True)
    progress.update(3, {"critic/score/mean": 0.25, "timing_s/step": 2.0})
    progress.close()
    err = capsys.readouterr().err
    assert "3/4" in err and "score=0.25" in err and "step_s=2" in err


def test_rollout_dump_one_json_per_sample(tmp_path):
    path = dump_rollout_jsonl(str(tmp_path / "rollouts"), 7, ["1+1=", "2+2="], ["2", "5"], [1.0, 0.0],
                              extra={"data_source": ["a", "b"], "response_length": torch.tensor([1, 1])})
    assert path.endswith("rollouts/7.jsonl")
    records = [json.loads(line) for line in open(path, encoding="utf-8")]
    assert records == [
        {"input": "1+1=", "output": "2", "score": 1.0, "step": 7, "data_source": "a", "response_length": 1},
        {"input": "2+2=", "output": "5", "score": 0.0, "step": 7, "data_source": "b", "response_length": 1},
    ]


def test_rollout_dump_rejects_mismatched_lengths(tmp_path):
    with pytest.raises(ValueError, match="one entry per sample"):
        dump_rollout_jsonl(str(tmp_path), 1, ["a", "b"], ["x"], [1.0, 0.0])


def test_logger_namespace_single_handler_and_verbosity():
    logger = get_logger("trainer")
    assert logger.name == "hybridrl.trainer"
    get_logger()
    own = [h for h in logging.getLogger("hybridrl").handlers if type(h).__name__ != "LogCaptureHandler"]
    assert len(own) == 1  # (the suite's conftest adds pytest's capture handler beside it)
    set_verbosity("WARNING")
    assert not logger.isEnabledFor(logging.INFO)
    set_verbosity(logging.INFO)
    with pytest.raises(ValueError, match="unknown log level"):
        set_verbosity("LOUD")


def test_import_is_silent_and_light():
    code = ("import logging, sys, hybridrl, hybridrl.logging; "
            "assert not logging.getLogger().handlers; "
            "assert not any(m.split('.')[0] in ('tqdm', 'matplotlib', 'torch', 'wandb') for m in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""
