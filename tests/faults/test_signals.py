"""Signals to a trainer started from the command line, as Slurm and Kubernetes send them.

SIGTERM to every process of the job (Slurm's way; the trainer's own process group here) while a step runs on
two rank processes: the ranks keep serving, the step finishes, a checkpoint is saved, the trainer exits 143
with one line naming the signal and the checkpoint, no process outlives it, nothing is left in the run folder
or the temp directory, and the same command resumes. SIGUSR1 while the trainer loads does not kill it: the
request waits for the first step.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from hybridrl.checkpoint.pid_file import PID_FILE
from hybridrl.checkpoint.startup import rank_log_folders
from hybridrl.config import load_config
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.elastic.test_elastic import GATED_REWARD, open_gate, read, steps_logged, wait_for
from tests.trainer.test_ppo_trainer import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_trainer(args: list[str], log_path: str) -> subprocess.Popen:
    """`python -m hybridrl.trainer.main_ppo ...` in a session of its own (so the test can signal its group)."""
    with open(log_path, "w") as log_file:
        return subprocess.Popen([sys.executable, "-m", "hybridrl.trainer.main_ppo", *args], cwd=REPO,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True)


def children_of(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
def test_sigterm_to_every_process_of_the_job_finishes_the_step_saves_and_exits_143(tmp_path, overrides_for, caplog):
    out, log_path, gate = str(tmp_path / "run"), str(tmp_path / "trainer.log"), str(tmp_path / "gate")
    reward = tmp_path / "gated_reward.py"
    reward.write_text(GATED_REWARD)
    open_gate(gate, 1)
    args = overrides_for(out, 4, ["trainer.save_freq=3", "trainer.n_gpus_per_node=2",
                                  f"custom_reward_function.path={reward}",
                                  f"+custom_reward_function.reward_kwargs.gate={gate}"])
    proc = start_trainer(args, log_path)
    try:
        wait_for(lambda: steps_logged(out) >= 1, "step 1 in metrics.jsonl", proc, log_path, timeout=240)
        children = children_of(proc.pid)  # the two ranks (and multiprocessing's helpers)
        assert len(children) >= 2
        os.killpg(proc.pid, signal.SIGTERM)  # trainer and ranks at once, while step 2 waits for its scores
        wait_for(lambda: "received SIGTERM: step 2 finishes, then a checkpoint is saved" in read(log_path),
                 "the receipt", proc, log_path)
        open_gate(gate, 99)
        assert proc.wait(timeout=120) == 143, read(log_path)
    finally:
        stop(proc)
    output = read(log_path).rstrip().splitlines()
    assert output[-1] == (f"hybridrl: stopped by SIGTERM after step 2 of 4; checkpoint {out}/global_step_2: the same "
                          "command resumes from it (trainer.resume_mode=auto)")
    assert read(os.path.join(out, "latest_checkpointed_iteration.txt")).strip() == "2"
    assert [r["step"] for r in read_metrics(out)] == [1, 2]
    time.sleep(0.5)  # orphans would be reparented and running now
    assert [pid for pid in children if running(pid)] == [], "processes outlived the trainer"
    assert not os.path.exists(os.path.join(out, PID_FILE)) and rank_log_folders(owner=proc.pid) == []

    PPOTrainer(load_config(args)).fit()  # the same command resumes
    assert [r["step"] for r in read_metrics(out)] == [1, 2, 3, 4]
    assert f"resumed from {out}/global_step_2: continuing at step 3" in caplog.text


HELD_AT_IMPORT = """
import os, time

while not os.path.exists(os.environ["LOADING_GATE"]):  # imported while the trainer loads: hold it there
    time.sleep(0.01)


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str.strip() == str(ground_truth))
"""


@pytest.mark.slow
def test_sigusr1_while_the_trainer_loads_does_not_kill_it(tmp_path, overrides_for, monkeypatch):
    out, log_path, gate = str(tmp_path / "run"), str(tmp_path / "trainer.log"), str(tmp_path / "loading_gate")
    reward = tmp_path / "held_reward.py"
    reward.write_text(HELD_AT_IMPORT)
    monkeypatch.setenv("LOADING_GATE", gate)
    proc = start_trainer(overrides_for(out, 1, [f"custom_reward_function.path={reward}"]), log_path)
    try:
        wait_for(lambda: os.path.exists(os.path.join(out, PID_FILE)), "trainer.pid", proc, log_path, timeout=240)
        os.kill(proc.pid, signal.SIGUSR1)  # the trainer is constructing: its reward file waits for the gate
        wait_for(lambda: "received SIGUSR1 (grow-rollout); applied at the next step boundary" in read(log_path),
                 "the receipt", proc, log_path)
        with open(gate, "w"):
            pass
        assert proc.wait(timeout=240) == 0, read(log_path)
    finally:
        stop(proc)
    output = read(log_path)
    assert "rollout grow request (SIGUSR1) refused: no devices left to grow onto" in output  # applied at step 1
    assert [r["step"] for r in read_metrics(out)] == [1]


@pytest.fixture(autouse=True)
def _no_gate_env_leaks(monkeypatch):
    monkeypatch.delenv("LOADING_GATE", raising=False)
