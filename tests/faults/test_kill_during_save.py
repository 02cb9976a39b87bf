"""kill -9 at moments spread over saves: "latest" never names a partial checkpoint, every restart resumes, and
the run that was killed again and again ends bitwise equal to one that never was.

Each run is a child forked from a forkserver that imported the trainer once (`runs`); a kill lands a chosen
delay after the save's temporary folder appears (the save of the tiny model takes some milliseconds, so the
delays cover writing the roles, the data position, the rename, the tracker and the rotation, and some land
in the next step).
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from hybridrl.checkpoint.manager import find_resume_dir, load_data_state, read_trainer_state
from hybridrl.checkpoint.role_files import load_role, read_model_weights
from tests.faults import runs

SAVES = ["trainer.save_freq=1", "trainer.max_actor_ckpt_to_keep=2"]
ALL = ["model", "optimizer", "extra"]


def wait_for_a_save(root: str, proc, timeout_s: float = 300) -> bool:
    """Poll until a save's temporary folder exists (True) or the run ends (False)."""
    deadline = time.monotonic() + timeout_s
    while proc.is_alive() and time.monotonic() < deadline:
        if os.path.isdir(root) and any(name.startswith(".tmp_global_step_") for name in os.listdir(root)):
            return True
        time.sleep(0.0005)
    return False


def resumable_step(root: str) -> int:
    """The step a restart resumes from (0: none), after checking that checkpoint is whole: every part of the
    actor reads back and matches its manifest, the trainer state and data position are there."""
    path = find_resume_dir(root, "auto", None)
    if path is None:
        return 0
    assert os.path.basename(path).startswith("global_step_"), path
    load_role(os.path.join(path, "actor"), ALL)
    assert load_data_state(path) is not None
    return read_trainer_state(path)["global_step"]


def kill_chain(root: str, overrides: list[str], delays: list[float], tmp_path) -> list[tuple[float, int]]:
    """Restart (resume_mode=auto) and kill `delay` seconds into a save, for each delay; then run to the end.
    Returns (delay, step resumable after the kill) for the runs that were killed."""
    outcomes, last = [], 0
    for i, delay in enumerate(delays):
        proc = runs.start(runs.train, (overrides,), str(tmp_path / f"kill{i}.json"))
        if wait_for_a_save(root, proc):
            time.sleep(delay)
            proc.kill()
        proc.join()
        step = resumable_step(root)
        assert step >= last, f"a kill {delay}s into a save lost saved steps: resumable step {step} after {last}"
        if proc.exitcode == -signal.SIGKILL:
            outcomes.append((delay, step))
        last = step
    result = runs.run(runs.train, (overrides,), str(tmp_path / "final.json"))
    assert result["ok"], result.get("traceback")
    return outcomes


def check_chain(tmp_path, overrides_for, steps: int, delays: list[float]) -> None:
    straight = str(tmp_path / "straight")
    result = runs.run(runs.train, (overrides_for(straight, steps, SAVES),), str(tmp_path / "straight.json"))
    assert result["ok"], result.get("traceback")
    killed = str(tmp_path / "killed")
    outcomes = kill_chain(killed, overrides_for(killed, steps, SAVES), delays, tmp_path)
    assert len(outcomes) >= len(delays) - 1, f"too few runs were killed during a save: {outcomes}"
    assert resumable_step(killed) == steps
    want = read_model_weights(os.path.join(straight, f"global_step_{steps}", "actor"))
    got = read_model_weights(os.path.join(killed, f"global_step_{steps}", "actor"))
    assert want.keys() == got.keys() and all(torch.equal(got[name], want[name]) for name in want)
    assert sorted(os.listdir(killed)) == sorted(os.listdir(straight))  # no partial saves, the same rotation


def test_kills_during_saves_lose_nothing(tmp_path, overrides_for):
    check_chain(tmp_path, overrides_for, steps=4, delays=[0.0, 0.003, 0.03])


@pytest.mark.slow
def test_many_kills_during_saves_lose_nothing(tmp_path, overrides_for):
    delays = [0.0005 * 2**k for k in range(9)] + [0.0, 0.0015, 0.006, 0.1]  # 0 .. 0.13 s after the save starts
    check_chain(tmp_path, overrides_for, steps=len(delays) + 2, delays=delays)
