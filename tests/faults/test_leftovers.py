"""A killed run's leftovers are named at the next start (stale trainer.pid, partial saves, kept rank logs), and
the test suite leaves nothing in the temp directory."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time

import pytest

from hybridrl.checkpoint.pid_file import read_pid_file
from hybridrl.checkpoint.startup import rank_log_folders, report_leftovers
from hybridrl.config import load_config
from hybridrl.distributed import LocalWorkerGroup, WorkerDiedError
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.distributed.toy_workers import ToyWorker
from tests.faults import runs
from tests.faults.test_kill_during_save import wait_for_a_save


def wait_for(predicate, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_killed_trainer_is_named_at_the_next_start_which_resumes(tmp_path, overrides_for, caplog):
    out = str(tmp_path / "run")
    saves = ["trainer.save_freq=1"]
    proc = runs.start(runs.train, (overrides_for(out, 3, saves),), str(tmp_path / "killed.json"))
    assert wait_for_a_save(out, proc)
    proc.kill()  # at once: the save's temporary folder is there
    proc.join()
    assert read_pid_file(os.path.join(out, "trainer.pid")).pid == proc.pid
    partial = [n for n in os.listdir(out) if n.startswith(".tmp_global_step_")]
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        PPOTrainer(load_config(overrides_for(out, 3, saves))).fit()
    assert f"trainer.pid names pid {proc.pid}, which is gone: the previous run there did not end cleanly" in caplog.text
    if partial:  # the kill landed before the save's rename
        assert f"removed 1 partial checkpoint(s) an interrupted save left in {out}: {partial[0]}" in caplog.text
    assert sorted(n for n in os.listdir(out) if n.startswith((".", "global_step", "trainer.pid"))) == \
        ["global_step_1", "global_step_2", "global_step_3"]


def test_a_killed_controllers_rank_logs_are_named_at_the_next_start(tmp_path, caplog):
    before = set(rank_log_folders())
    proc = runs.start(runs.hold_a_worker_group, (str(tmp_path / "ready.json"),), str(tmp_path / "r.json"))
    wait_for(lambda: (tmp_path / "ready.json").exists() or not proc.is_alive())
    group = json.loads((tmp_path / "ready.json").read_text())
    proc.kill()
    proc.join()
    wait_for(lambda: all(pid_gone(pid) for pid in group["rank_pids"]), 60)  # the rank exits: no orphan
    assert os.path.isdir(group["log_dir"]) and group["log_dir"] not in before
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        found = report_leftovers(str(tmp_path / "next_run"))
    assert group["log_dir"] in found.rank_logs
    assert "that failed or were killed are kept in the temp directory" in caplog.text and group["log_dir"] in \
        caplog.text
    shutil.rmtree(group["log_dir"])  # read, then deleted, as the line says


def test_a_killed_rank_keeps_its_log_for_the_error_and_the_suite_removes_it():
    """Within a run the folder is named by the error (kept for the user); the test fixture removes it after."""
    group = LocalWorkerGroup(ToyWorker, {}, world_size=1, role="doomed")
    try:
        os.kill(group.pids[0], signal.SIGKILL)
        with pytest.raises(WorkerDiedError, match=r"doomed worker rank 0 died .* full log: .*rank0.log"):
            group.call_all("getpid")
        assert os.path.isdir(group.log_dir) and group.log_dir in rank_log_folders(owner=os.getpid())
    finally:
        group.shutdown()
