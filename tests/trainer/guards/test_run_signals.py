"""SIGTERM/SIGINT and SIGUSR1/SIGUSR2 in one process: a signal mid-step lets the step finish and saves, a
second one abandons the step, one before the first step stops at once, rollout requests sent while the trainer
loads wait for the first step, and a late one after the last step is ignored with a line. With Ray, the
signal reaches the driver (ray.init's own SIGTERM handler is taken back) and every Ray actor is stopped.
The subprocess runs (the command line, ranks in their own processes) are in tests/faults/test_signals.py."""

from __future__ import annotations

import logging
import os
import signal
import time

import pytest

from hybridrl.checkpoint.pid_file import PID_FILE
from hybridrl.config import load_config
from hybridrl.trainer.ppo_trainer import PPOTrainer
from hybridrl.trainer.guards.run_signals import RunStopped
from tests.trainer.helpers import tiny_run_overrides
from tests.trainer.test_ppo_trainer import read_metrics

TRACKER = "latest_checkpointed_iteration.txt"


def signal_during(trainer: PPOTrainer, step: int, *signums: int) -> None:
    """Send `signums` to this process while step `step` scores its rollouts (mid-step, on the controller)."""
    score = trainer.roles.reward.compute_scores

    def score_and_signal(batch, **kwargs):
        if trainer.global_step == step:
            for signum in signums:
                os.kill(os.getpid(), signum)
                time.sleep(0.01)  # handled at the next bytecode, one at a time
        return score(batch, **kwargs)

    trainer.roles.reward.compute_scores = score_and_signal


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def test_sigterm_mid_step_finishes_it_saves_and_stops(tmp_path, arith_model_dir, arithmetic_files, capfd):
    out = str(tmp_path)
    overrides = tiny_run_overrides(arith_model_dir, arithmetic_files, out, steps=4, extra=["trainer.save_freq=3"])
    before = signal.getsignal(signal.SIGTERM)
    trainer = PPOTrainer(load_config(overrides))
    signal_during(trainer, 2, signal.SIGTERM)
    with pytest.raises(RunStopped) as info:
        trainer.fit()
    assert info.value.exit_code == 143 and info.value.signal_name == "SIGTERM"
    assert str(info.value) == (f"stopped by SIGTERM after step 2 of 4; checkpoint {out}/global_step_2: the same "
                               "command resumes from it (trainer.resume_mode=auto)")
    assert ("[hybridrl] received SIGTERM: step 2 finishes, then a checkpoint is saved and the run stops; send SIGTERM "
            "again to stop at once") in capfd.readouterr().err
    assert read(os.path.join(out, TRACKER)).strip() == "2"  # step 2 is not a save step of save_freq=3
    assert [r["step"] for r in read_metrics(out)] == [1, 2]
    assert signal.getsignal(signal.SIGTERM) == before and not os.path.exists(os.path.join(out, PID_FILE))

    PPOTrainer(load_config(overrides)).fit()  # the same command resumes
    assert [r["step"] for r in read_metrics(out)] == [1, 2, 3, 4]


def test_a_second_signal_abandons_the_step(tmp_path, arith_model_dir, arithmetic_files):
    out = str(tmp_path)
    trainer = PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out, steps=3,
                                                        extra=["trainer.save_freq=1"])))
    signal_during(trainer, 2, signal.SIGINT, signal.SIGINT)
    with pytest.raises(RunStopped) as info:
        trainer.fit()
    assert info.value.exit_code == 130
    assert str(info.value) == (f"stopped by SIGINT (a second signal) during step 2: the step was abandoned; the latest "
                               f"checkpoint is {out}/global_step_1")
    assert read(os.path.join(out, TRACKER)).strip() == "1" and not os.path.exists(os.path.join(out, "global_step_2"))
    assert [r["step"] for r in read_metrics(out)] == [1]
    assert not os.path.exists(os.path.join(out, PID_FILE))


def test_a_signal_without_checkpoints_says_so(tmp_path, arith_model_dir, arithmetic_files):
    trainer = PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path), steps=3)))
    signal_during(trainer, 1, signal.SIGINT)
    with pytest.raises(RunStopped, match=r"^stopped by SIGINT after step 1 of 3; no checkpoint saved "
                                         r"\(trainer.save_freq=-1: set it > 0 to make a stopped run resumable\); "
                                         rf"{tmp_path} holds no checkpoint to resume from$"):
        trainer.fit()



def test_a_signal_during_the_last_step_lets_the_run_complete(tmp_path, arith_model_dir, arithmetic_files, capfd):
    out = str(tmp_path)
    trainer = PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out, steps=2,
                                                        extra=["trainer.save_freq=1"])))
    signal_during(trainer, 2, signal.SIGTERM)
    trainer.fit()  # no step boundary follows step 2's: its regular save is the last checkpoint
    assert ("[hybridrl] received SIGTERM: step 2 finishes, then the run completes (it was the last step)"
            in capfd.readouterr().err)
    assert read(os.path.join(out, TRACKER)).strip() == "2" and [r["step"] for r in read_metrics(out)] == [1, 2]

LOADING_REWARD = """
import os, signal

for name in os.environ["SIGNALS_AT_IMPORT"].split(","):  # this file is imported while the trainer loads
    os.kill(os.getpid(), getattr(signal, name))


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str.strip() == str(ground_truth))
"""


def loading_run(tmp_path, model_dir, files, signals: str, monkeypatch) -> list[str]:
    reward = tmp_path / "reward.py"
    reward.write_text(LOADING_REWARD)
    monkeypatch.setenv("SIGNALS_AT_IMPORT", signals)
    return tiny_run_overrides(model_dir, files, str(tmp_path / "run"), steps=1,
                              extra=[f"custom_reward_function.path={reward}"])


def test_a_signal_while_loading_stops_at_once(tmp_path, arith_model_dir, arithmetic_files, monkeypatch):
    before = signal.getsignal(signal.SIGTERM)
    overrides = loading_run(tmp_path, arith_model_dir, arithmetic_files, "SIGTERM", monkeypatch)
    with pytest.raises(RunStopped, match="^stopped by SIGTERM before the first training step: nothing was trained"):
        PPOTrainer(load_config(overrides))
    assert signal.getsignal(signal.SIGTERM) == before
    assert not os.path.exists(tmp_path / "run" / PID_FILE)


def test_rollout_requests_while_loading_wait_for_the_first_step_and_late_ones_are_ignored(
        tmp_path, arith_model_dir, arithmetic_files, monkeypatch, caplog, capfd):
    overrides = loading_run(tmp_path, arith_model_dir, arithmetic_files, "SIGUSR1", monkeypatch)
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        PPOTrainer(load_config(overrides)).fit()
    # applied at step 1's boundary: refused in one process, whose rollout already shares the actor's device
    assert "rollout grow request (SIGUSR1) refused: no devices left to grow onto" in caplog.text
    os.kill(os.getpid(), signal.SIGUSR1)  # after the last step: a line, not the default action (exit)
    time.sleep(0.05)
    err = capfd.readouterr().err
    assert "received SIGUSR1 (grow-rollout); applied at the next step boundary" in err
    assert "received SIGUSR1 while no training runs (starting up or finished): ignored" in err


# ---------------------------------------------------------------- Ray: the driver gets the signal
LOCAL_RAY = ["trainer.launcher=ray", "ray_kwargs.ray_init.num_cpus=2", "+ray_kwargs.ray_init.include_dashboard=false",
             "trainer.n_gpus_per_node=2", "trainer.ray_wait_register_center_timeout=60"]


def test_handlers_replaced_while_the_run_is_built_are_taken_back(tmp_path):
    """ray.init (inside the trainer's construction) installs a SIGTERM handler that exits at once."""
    from hybridrl.trainer.guards.run_signals import RunSignals

    signals = RunSignals(str(tmp_path))
    signals.install()
    try:
        signal.signal(signal.SIGTERM, lambda signum, frame: None)  # what ray.init does
        signals.reclaim()
        assert signal.getsignal(signal.SIGTERM) == signals._on_stop_signal
        assert signal.getsignal(signal.SIGINT) == signals._on_stop_signal
    finally:
        signals.close()


@pytest.mark.slow  # a local Ray instance (~1 min here); the take-back itself is tested above
def test_sigterm_to_a_ray_driver_saves_and_stops_every_actor(tmp_path, arith_model_dir, arithmetic_files):
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'hybridrl[ray]')")
    if ray.is_initialized():
        ray.shutdown()
    out = str(tmp_path)
    trainer = PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out, steps=3,
                                                        extra=LOCAL_RAY + ["trainer.save_freq=5"])))
    actor_pids = [pid for group in trainer.roles.groups.by_name.values() for pid in group.pids]
    signal_during(trainer, 1, signal.SIGTERM)  # ray.init's handler would exit at once: the trainer took it back
    with pytest.raises(RunStopped, match=f"^stopped by SIGTERM after step 1 of 3; checkpoint {out}/global_step_1"):
        trainer.fit()
    assert not ray.is_initialized()  # the trainer started Ray, so it stopped it
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in actor_pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in actor_pids), "Ray actor processes outlived the run"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone, only not reaped yet
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"
