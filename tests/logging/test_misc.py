"""Progress bar silence off-TTY, rollout dumps, the library logger, and a light `import hybridrl.logging`."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
import torch

from hybridrl.logging.log import ConsoleHandler, get_logger, set_verbosity
from hybridrl.logging.progress import StepProgress
from hybridrl.logging.rollout_dump import dump_rollout_jsonl


def test_progress_off_tty_prints_a_line_with_eta_every_few_steps(capsys):
    now = [100.0]
    progress = StepProgress(total_steps=8, initial_step=0, enabled=None, every=3, clock=lambda: now[0])
    assert not progress.enabled  # pytest's captured stderr is not a TTY
    for step in range(1, 9):
        now[0] += 2.0  # 2 s per step
        progress.update(step, {"critic/score/mean": 0.5})
    progress.close()
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.splitlines() == [
        "progress: step 3/8 (38%) | elapsed 6s | 2.00 s/step | eta 10s",
        "progress: step 6/8 (75%) | elapsed 12s | 2.00 s/step | eta 4s",
        "progress: step 8/8 (100%) | elapsed 16s | 2.00 s/step | eta 0s",
    ]


def test_progress_counts_only_this_process_steps_after_a_resume():
    now = [0.0]
    progress = StepProgress(total_steps=100, initial_step=60, enabled=False, clock=lambda: now[0])
    assert progress.every == 4  # ~10 lines over the 40 steps left
    now[0] = 30.0
    assert progress.progress_line(70) == "progress: step 70/100 (70%) | elapsed 30s | 3.00 s/step | eta 1m30s"


def test_progress_enabled_shows_steps_and_metrics(capsys):
    progress = StepProgress(total_steps=4, initial_step=1, enabled=True)
    progress.update(3, {"critic/score/mean": 0.25, "timing_s/step": 2.0})
    progress.close()
    err = capsys.readouterr().err
    assert "3/4" in err and "score=0.25" in err and "step_s=2" in err


def test_lines_never_glue_to_an_open_bar(capsys):
    """With the bar open, step lines and log records are written around it (tqdm.write): each starts a line."""
    import re
    import sys

    from hybridrl.logging.terminal import write_line

    progress = StepProgress(total_steps=3, enabled=True)
    for step in (1, 2, 3):
        progress.update(step, {"timing_s/step": 1.0})
        write_line(f"step:{step} | reward score 0.5", file=sys.stderr)  # the bar's stream: the worst case
    progress.close()
    err = capsys.readouterr().err
    assert err.count("step:") == 3 and "3/3" in err
    assert re.search(r"[^\r\n]step:", err) is None, err  # never glued behind the bar's text


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
    get_logger("trainer")  # asking again adds nothing
    # Only our own handler counts: pytest (and plugins, by version) attach capture handlers beside it.
    own = [h for h in logging.getLogger("hybridrl").handlers if isinstance(h, ConsoleHandler)]
    assert len(own) == 1
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
