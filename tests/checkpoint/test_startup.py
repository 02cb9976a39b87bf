"""checkpoint/startup.py: a start names what an earlier run left behind and removes its partial saves."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile

import pytest

from hybridrl.checkpoint.startup import announce_start, find_leftovers, rank_log_folders, report_leftovers
from hybridrl.config import load_config


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    """The temp directory rank logs go to, here a folder of this test's own."""
    folder = tmp_path / "system_tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_a_killed_runs_leftovers_are_named_and_partial_saves_removed(tmp_path, temp_dir, caplog):
    run = tmp_path / "run"
    (run / ".tmp_global_step_4" / "actor").mkdir(parents=True)
    (run / "global_step_2").mkdir()
    pid = dead_pid()
    (run / "trainer.pid").write_text(f"{pid}\n")
    kept = temp_dir / f"hybridrl-actor_rollout_ref-{pid}-abc123de"
    kept.mkdir()
    (temp_dir / f"hybridrl-critic-{os.getpid()}-zz9x8y7w").mkdir()  # a live controller's (ours): not a leftover
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        found = report_leftovers(str(run))
    assert found.stale_pid == pid and found.rank_logs == [str(kept)]
    assert f"trainer.pid names pid {pid}, which is gone: the previous run there did not end cleanly" in caplog.text
    assert "removed 1 partial checkpoint(s) an interrupted save left in" in caplog.text and ".tmp_global_step_4" in \
        caplog.text
    assert f"rank logs of 1 earlier run(s) that failed or were killed are kept in the temp directory: {kept}" in \
        caplog.text
    assert sorted(os.listdir(run)) == ["global_step_2", "trainer.pid"]
    assert kept.is_dir()  # a failed run's last words: named, not deleted
    assert rank_log_folders(owner=os.getpid()) == [str(temp_dir / f"hybridrl-critic-{os.getpid()}-zz9x8y7w")]


def test_a_live_trainer_in_the_same_folder_is_named_and_its_save_left_alone(tmp_path, temp_dir, caplog):
    run = tmp_path / "run"
    (run / ".tmp_global_step_4").mkdir(parents=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (run / "trainer.pid").write_text(f"{other.pid}\n")
        with caplog.at_level(logging.WARNING, logger="hybridrl"):
            found = report_leftovers(str(run))
    finally:
        other.kill()
        other.wait()
    assert found.live_pid == other.pid and found.stale_pid is None
    assert "which is running: if it is another trainer using this trainer.default_local_dir" in caplog.text
    assert (run / ".tmp_global_step_4").is_dir()


def test_a_clean_folder_reports_nothing(tmp_path, temp_dir, caplog):
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        found = find_leftovers(str(tmp_path / "never_used"))
        report_leftovers(str(tmp_path))
    assert found.stale_pid is found.live_pid is None and not found.partial_saves and not caplog.text


def test_start_lines(tmp_path, caplog):
    (tmp_path / "global_step_3").mkdir()
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        announce_start(str(tmp_path), load_config(["trainer.resume_mode=disable"]), None)
    assert f"trainer.resume_mode=disable: {tmp_path} already holds 1 checkpoint(s) (steps 3)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        announce_start(str(tmp_path), load_config([]), None)  # auto, no tracker
    assert "holds checkpoints (steps 3) but no latest_checkpointed_iteration.txt" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        announce_start(str(tmp_path), load_config(["actor_rollout_ref.actor.checkpoint.load_contents=[optimizer]"]),
                       str(tmp_path / "global_step_3"))
    assert "without the actor's weights" in caplog.text
