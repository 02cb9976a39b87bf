"""The run's signals, from the trainer's construction to the end of `fit()`.

SIGTERM (what Slurm, Kubernetes and `kill` send) and SIGINT (Ctrl-C):
- before the first training step (loading, resuming, validation before training) the first one stops the run at
  once: nothing has been trained, so there is nothing to save;
- during training the first one lets the current step finish, then saves a checkpoint of that step when
  `trainer.save_freq` > 0 (unless the step's regular save just wrote it) and stops: `RunStopped`, whose one line
  names the signal and the checkpoint, and exit status 128 + the signal (143 SIGTERM, 130 SIGINT) from the
  command line. A signal during the last step lets the run complete;
- a second one stops at once: the step is abandoned, the last checkpoint stays the latest. The handlers are then
  the ones from before, so a third gets the default action.
Either way the trainer's `finally` stops the worker ranks (which ignore these signals themselves while the
trainer lives: `distributed.rank_runtime.defer_stop_signals_to_controller`), removes their log folders and
`trainer.pid`. SIGUSR1/SIGUSR2 (`elastic/control.py`) are taken from construction on: a request that arrives
while the trainer loads is applied at the first step boundary.

Signal handlers run between the main thread's bytecodes; the receipt is one `os.write` (no logging locks).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any, Protocol

from hybridrl.checkpoint.manager import tracker_step
from hybridrl.elastic.control import ElasticController, Request
from hybridrl.logging.log import get_logger
from hybridrl.trainer import checkpointing

log = get_logger("hybridrl.trainer")
STOP_SIGNALS = ("SIGTERM", "SIGINT")


class RunStopped(KeyboardInterrupt):
    """A run stopped by SIGTERM or SIGINT. A KeyboardInterrupt, so no `except Exception` on the way swallows it and
    worker groups abort an in-flight call; `exit_code` is what a shell reports for a process the signal ended."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signal_name = signal.Signals(signum).name
        self.exit_code = 128 + signum


class StoppableRun(checkpointing.CheckpointedRun, Protocol):
    """What stopping at a step boundary reads of the trainer."""

    total_steps: int
    trackers: Any  # logging.tracker.MultiTracker


class RunSignals:
    """SIGTERM/SIGINT handlers and the elastic rollout's controller (SIGUSR1/SIGUSR2, `trainer.pid`) of one run."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.control = ElasticController(run_dir)
        self.received: list[int] = []  # signal numbers, appended by the handler
        self.training = False  # from the first step boundary on: the first signal waits for the step's end
        self.next_step = 1
        self.total_steps = 0  # read at the first step boundary
        self.save_freq = 0  # trainer.save_freq, read at the first step boundary
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Name an earlier run's leftovers, write trainer.pid, take the four signals (main thread only)."""
        self.control.install()
        if threading.current_thread() is not threading.main_thread():
            log.info("SIGTERM/SIGINT handlers are not installed: the trainer is not built in the main thread")
            return
        for name in STOP_SIGNALS:
            number = getattr(signal, name)
            self._previous[number] = signal.signal(number, self._on_stop_signal)

    @classmethod
    def around(cls, run_dir: str, build: Callable[[], None]) -> RunSignals:
        """The run's signals, installed before `build()` constructs the trainer (closed again if that fails) and
        taken back from whatever replaced them meanwhile (`reclaim`)."""
        signals = cls(run_dir)
        signals.install()
        try:
            build()
        except BaseException:
            signals.close()
            raise
        signals.reclaim()
        return signals

    def reclaim(self) -> None:
        """Take SIGTERM/SIGINT back from what replaced the handlers while the run was built (`ray.init` installs
        a SIGTERM handler of its own that exits at once)."""
        for number in self._previous:
            if signal.getsignal(number) != self._on_stop_signal:
                signal.signal(number, self._on_stop_signal)

    def close(self) -> None:
        """The SIGTERM/SIGINT handlers from before `install()` back; the controller closed (trainer.pid removed)."""
        self._restore()
        self.control.close()

    def _restore(self) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        self.received.append(signum)
        if not self.training:
            self._restore()
            raise RunStopped(f"stopped by {name} before the first training step: nothing was trained and no "
                             f"checkpoint written", signum)
        if len(self.received) > 1:
            self._restore()
            raise RunStopped(f"stopped by {name} (a second signal) during step {self.next_step}: the step was "
                             f"abandoned; {self._latest_checkpoint_line()}", signum)
        if self.next_step >= self.total_steps:  # no step boundary follows: the run completes as configured
            then = "the run completes (it was the last step)"
        elif self.save_freq > 0:
            then = "a checkpoint is saved and the run stops"
        else:
            then = f"the run stops without a checkpoint (trainer.save_freq={self.save_freq})"
        os.write(2, f"[hybridrl] received {name}: step {self.next_step} finishes, then {then}; send {name} again to "
                    f"stop at once\n".encode())

    def at_step_boundary(self, run: StoppableRun) -> list[Request]:
        """Called before each step: if a signal asked the run to stop, save (when configured) and raise RunStopped;
        else the rollout requests (grow/shrink) that arrived, to apply now (`ElasticController.pending`)."""
        self.training, self.next_step, self.total_steps = True, run.global_step + 1, run.total_steps
        self.save_freq = run.cfg.trainer.save_freq
        if not self.received:
            return self.control.pending()
        signum = self.received[0]
        checkpoint = self._save_for_stop(run)
        run.trackers.finish()  # the console's summary (with the checkpoint), files closed, loggers finished
        name = signal.Signals(signum).name
        where = f"after step {run.global_step} of {run.total_steps}"
        if checkpoint is None:
            raise RunStopped(f"stopped by {name} {where}; no checkpoint saved (trainer.save_freq="
                             f"{self.save_freq}: set it > 0 to make a stopped run resumable); "
                             f"{self._latest_checkpoint_line()}", signum)
        raise RunStopped(f"stopped by {name} {where}; checkpoint {checkpoint}: {_resume_hint(run, checkpoint)}",
                         signum)

    def _save_for_stop(self, run: StoppableRun) -> str | None:
        if self.save_freq <= 0 or run.global_step == 0:
            return None
        root = checkpointing.root_dir(run.cfg)
        if tracker_step(root) == str(run.global_step):  # this step's regular save
            return os.path.join(root, f"global_step_{run.global_step}")
        return checkpointing.save(run)

    def _latest_checkpoint_line(self) -> str:
        step = tracker_step(self.run_dir)
        if step is None:
            return f"{self.run_dir} holds no checkpoint to resume from"
        return f"the latest checkpoint is {os.path.join(self.run_dir, f'global_step_{step}')}"


def _resume_hint(run: StoppableRun, checkpoint: str) -> str:
    if run.cfg.trainer.resume_mode == "auto":
        return "the same command resumes from it (trainer.resume_mode=auto)"
    return f"resume with trainer.resume_mode=resume_path trainer.resume_from_path={checkpoint}"
