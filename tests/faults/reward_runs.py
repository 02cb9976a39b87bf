"""Real `hybridrl train` processes with a misbehaving reward function, for the reward fault tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.faults import runs
from tests.trainer.helpers import tiny_run_overrides

REPO = Path(__file__).resolve().parents[2]

# mode (custom_reward_function.reward_kwargs.mode) picks the misbehaviour; the first call that misbehaves
# appends its process id to `marker`, so a test knows when the run is inside it.
REWARD_FILE = '''
import os
import sys
import time

calls = 0


def compute_score(data_source, solution_str, ground_truth, extra_info=None, mode="ok", marker=""):
    global calls
    calls += 1
    if mode != "ok" and marker:
        with open(marker, "a") as out:
            out.write(f"{os.getpid()}\\n")
    if mode == "exit":
        sys.exit(0)
    if mode == "hang" or (mode == "hang_first" and calls == 1):
        time.sleep(3600)
    if mode == "huge":
        return 1e308
    return float(solution_str.strip() == str(ground_truth))
'''


@dataclass
class TrainRun:
    process: subprocess.Popen
    out_dir: Path
    marker: Path

    def wait_for_marker(self, timeout_s: float = 300.0) -> list[int]:
        """Process ids that reached the misbehaving call (bounded wait; fails if the run ended first)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.marker.exists() and self.marker.read_text().strip():
                return [int(line) for line in self.marker.read_text().split()]
            if self.process.poll() is not None:
                raise AssertionError(f"the run ended (rc {self.process.returncode}) before the reward function "
                                     f"misbehaved:\n{self.stderr()[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"the reward function was not reached within {timeout_s} s")

    def interrupt(self) -> None:
        self.process.send_signal(signal.SIGINT)  # what Ctrl-C sends the trainer

    def interrupt_twice(self, timeout_s: float = 60.0) -> None:
        """Ctrl-C, then Ctrl-C again once the trainer has acknowledged the first: during training the first lets
        the step finish (trainer/guards/run_signals.py), which a step stuck in its reward function never does."""
        self.interrupt()
        deadline = time.monotonic() + timeout_s
        while "received SIGINT" not in self.stderr():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the trainer did not acknowledge SIGINT:\n{self.stderr()[-3000:]}")
            time.sleep(0.1)
        self.interrupt()

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout=timeout_s)

    def stderr(self) -> str:
        return (self.out_dir / "stderr.txt").read_text(errors="replace")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


def start_run(tmp_path: Path, model_dir: str, files: tuple[str, str], mode: str, extra: list[str]) -> TrainRun:
    """`python -m hybridrl.trainer.main_ppo` on the tiny arithmetic task with the reward file above."""
    out_dir = tmp_path / "run"
    out_dir.mkdir()
    reward_file, marker = tmp_path / "reward.py", tmp_path / "marker.txt"
    reward_file.write_text(REWARD_FILE)
    overrides = tiny_run_overrides(model_dir, files, str(out_dir), extra=[
        f"custom_reward_function.path={reward_file}", f"+custom_reward_function.reward_kwargs.mode={mode}",
        f"+custom_reward_function.reward_kwargs.marker={marker}", *extra])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(out_dir / "stderr.txt", "w") as err, open(out_dir / "stdout.txt", "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "hybridrl.trainer.main_ppo", *overrides], cwd=REPO,
                                   stdout=out, stderr=err, env=env)
    runs.STARTED.add(process.pid)  # the suite checks that it left no rank-log folder behind (conftest.py)
    return TrainRun(process, out_dir, marker)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
