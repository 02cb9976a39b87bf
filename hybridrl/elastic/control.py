"""Runtime requests to a running trainer: signals, request files, and `hybridrl control`.

Two ways in, one mechanism. `kill -USR1 <pid>` asks to grow the rollout (default devices: the actor's),
`kill -USR2 <pid>` to return every borrowed device. `hybridrl control <run_dir> grow-rollout --devices 0,1`
(or `shrink-rollout [--devices ...]`) writes a request file into `<run_dir>/control/` atomically (tmp +
rename) and then sends the matching signal to the trainer named by `<run_dir>/trainer.pid`, once it has checked
that the process running under that pid now is the one that wrote the file (`checkpoint/pid_file.py`: pid and
start time; a reused pid or a file naming another process is refused, nothing sent). The trainer installs the
handlers and writes the file when it is constructed, before anything loads, and removes the file at exit; a
request that arrives while the trainer loads waits for the first step boundary. The signal handler only
records that a signal arrived and writes one line to stderr; the trainer reads the requests at the next step
boundary (`ElasticController.pending`): the files of the signalled kinds, oldest first, and for a signal that
came without a file of its kind, the default request. A file is only read once its signal has arrived, so a
file is never mistaken for a bare signal. Outside a run (the command line's imports, after the last step) the
two signals are ignored with a line (`ignore_control_signals`) instead of ending the process, their default.
`<run_dir>` is `trainer.default_local_dir`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from hybridrl.checkpoint.pid_file import PID_FILE, process_identity, read_pid_file, remove_own_pid_file, write_pid_file
from hybridrl.logging.log import get_logger
from hybridrl.utils.processes import process_alive

log = get_logger("hybridrl.elastic")
CONTROL_DIR = "control"
COMMANDS = {"grow-rollout": "grow", "shrink-rollout": "shrink"}
ACTION_SIGNALS = {"grow": "SIGUSR1", "shrink": "SIGUSR2"}


@dataclass(frozen=True)
class Request:
    action: str  # "grow" | "shrink"
    devices: tuple[int, ...] | None  # None: grow onto the actor's devices / return everything borrowed
    source: str  # the request file's name, or the bare signal's name


def control_dir(run_dir: str) -> str:
    return os.path.join(run_dir, CONTROL_DIR)


def write_request(run_dir: str, action: str, devices: list[int] | None) -> str:
    """Write a request file atomically (tmp + rename); names sort by creation time."""
    directory = control_dir(run_dir)
    os.makedirs(directory, exist_ok=True)
    name = f"{time.time_ns():020d}-{os.getpid()}-{action}.json"
    tmp = os.path.join(directory, f".{name}.tmp")
    with open(tmp, "w") as f:
        json.dump({"action": action, "devices": devices}, f)
    os.replace(tmp, os.path.join(directory, name))
    return os.path.join(directory, name)


def _read_request(path: str) -> Request:
    with open(path) as f:
        data = json.load(f)
    action, devices = data.get("action"), data.get("devices")
    if action not in ACTION_SIGNALS:
        raise ValueError(f"unknown action {action!r}; use one of {sorted(ACTION_SIGNALS)}")
    if devices is not None and not (isinstance(devices, list) and all(type(d) is int for d in devices)):
        raise ValueError(f"devices must be a list of integers or null, got {devices!r}")
    return Request(action, tuple(devices) if devices is not None else None, os.path.basename(path))


class ElasticController:
    """Signal handlers, the pid file and request files of one `fit()`; `close()` restores everything."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.pid_path = os.path.join(run_dir, PID_FILE)
        self._received: list[str] = []  # signal names, appended by the handler (list.append is atomic)
        self._previous: dict[int, Any] = {}  # what signal.signal returned: a handler, SIG_DFL, SIG_IGN or None

    def install(self) -> bool:
        """Handlers for SIGUSR1/SIGUSR2 and the pid file; only possible from the main thread. An earlier run's
        leftovers in the folder (stale pid file, partial saves, kept rank logs) are named first."""
        from hybridrl.checkpoint.startup import report_leftovers  # imports torch: not for the CLI's early set-up

        os.makedirs(self.run_dir, exist_ok=True)
        report_leftovers(self.run_dir)
        if not hasattr(signal, "SIGUSR1") or threading.current_thread() is not threading.main_thread():
            log.info("rollout control signals are not installed (not the main thread, or no SIGUSR1 here)")
            return False
        self._drop_stale_requests()
        for name in ACTION_SIGNALS.values():
            number = getattr(signal, name)
            self._previous[number] = signal.signal(number, self._on_signal)
        self._write_pid_file()
        return True

    def _write_pid_file(self) -> None:
        """The pid file `hybridrl control` reads; a disk too full to hold it costs only that, not the run."""
        try:
            write_pid_file(self.pid_path)
        except OSError as err:
            log.warning(f"could not write {self.pid_path} ({err.strerror or err}): `hybridrl control` cannot reach "
                        f"this run; checkpoints into {self.run_dir} will fail the same way unless space is freed")

    def _on_signal(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        self._received.append(name)
        what = "grow-rollout" if name == "SIGUSR1" else "shrink-rollout"
        # One write(2), no locks: safe even if the signal interrupted a logging call.
        os.write(2, f"[hybridrl] received {name} ({what}); applied at the next step boundary\n".encode())

    def pending(self) -> list[Request]:
        """Requests to apply now, in arrival order; request files are consumed (deleted)."""
        count = len(self._received)
        if not count:
            return []
        signalled = list(dict.fromkeys(self._received[:count]))
        del self._received[:count]  # whatever the handler appended meanwhile stays for the next boundary
        requests = [r for r in self._read_files() if ACTION_SIGNALS[r.action] in signalled]
        for name in signalled:
            action = "grow" if name == "SIGUSR1" else "shrink"
            if not any(r.action == action for r in requests):
                requests.append(Request(action, None, name))
        for request in requests:
            if request.source not in ACTION_SIGNALS.values():
                os.remove(os.path.join(control_dir(self.run_dir), request.source))
        return requests

    def _read_files(self) -> list[Request]:
        directory = control_dir(self.run_dir)
        names = sorted(n for n in os.listdir(directory) if not n.startswith(".")) if os.path.isdir(directory) else []
        requests = []
        for name in names:
            path = os.path.join(directory, name)
            try:
                requests.append(_read_request(path))
            except (OSError, ValueError) as err:  # json errors are ValueErrors
                log.warning(f"rollout control request {path} ignored and removed: {err}")
                os.remove(path)
        return requests

    def _drop_stale_requests(self) -> None:
        stale = [r.source for r in self._read_files()]
        for name in stale:
            os.remove(os.path.join(control_dir(self.run_dir), name))
        if stale:
            log.warning(f"dropped {len(stale)} rollout control request(s) left by an earlier run: {stale}")

    def close(self) -> None:
        """The handlers from before `install()` back, except the default action, which would end the process on a
        late request: that becomes `ignore_control_signals`'s line, as does an earlier trainer's handler (a process
        trains one run at a time: a trainer built before this one and never closed takes no requests); the pid file
        removed."""
        for number, handler in self._previous.items():
            stale = handler in (signal.SIG_DFL, None) or isinstance(getattr(handler, "__self__", None), ElasticController)
            signal.signal(number, _ignored if stale else handler)
        self._previous.clear()
        remove_own_pid_file(self.pid_path)


def ignore_control_signals() -> None:
    """SIGUSR1/SIGUSR2 while no trainer takes requests (the command line's imports before the trainer exists):
    one line each instead of the default action, which ends the process. Main thread only; handlers that are not
    the default are left alone."""
    if not hasattr(signal, "SIGUSR1") or threading.current_thread() is not threading.main_thread():
        return
    for name in ACTION_SIGNALS.values():
        number = getattr(signal, name)
        if signal.getsignal(number) in (signal.SIG_DFL, None):
            signal.signal(number, _ignored)


def _ignored(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    os.write(2, f"[hybridrl] received {name} while no training runs (starting up or finished): ignored; "
                f"rollout requests are taken from the trainer's construction to its last step\n".encode())


# ---------------------------------------------------------------- `hybridrl control`
def _trainer_pid(run_dir: str) -> int:
    """The pid of the trainer that runs in `run_dir`, verified: RuntimeError (nothing to signal) unless the process
    under the pid file's pid is the very process that wrote the file (same boot, same start time)."""
    path = os.path.join(run_dir, PID_FILE)
    try:
        record = read_pid_file(path)
    except FileNotFoundError:
        raise RuntimeError(f"no {path}: no trainer is running with trainer.default_local_dir={run_dir}") from None
    except (OSError, ValueError) as err:
        raise RuntimeError(f"{path} could not be read as a pid file ({err}); nothing was sent") from None
    pid, now = record.pid, process_identity(record.pid)
    if not process_alive(pid):  # alive, another user's included: the identity check decides
        raise RuntimeError(f"the trainer (pid {pid} in {path}) is not running; the pid file is stale")
    if record.identity is None:
        raise RuntimeError(f"{path} names pid {pid} without the trainer's start time (written by hand or by an "
                           f"earlier hybridrl), so it cannot be checked that pid {pid} is this run's trainer; nothing "
                           f"was sent. If it is, signal it yourself: kill -USR1 {pid} (grow) or kill -USR2 {pid} (shrink)")
    if now is None:
        raise RuntimeError(f"cannot tell whether pid {pid} is this run's trainer: this system has no /proc to read its "
                           f"start time from; nothing was sent. Signal it yourself if it is: kill -USR1 {pid}")
    if now != record.identity:
        raise RuntimeError(f"pid {pid} in {path} is not this run's trainer: the process running under that pid "
                           f"started at another time than the one that wrote the file (the trainer is gone and its "
                           f"pid was reused, or the file names another process); nothing was sent")
    return pid


def _parse_devices(text: str) -> list[int]:
    try:
        devices = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--devices takes comma-separated integers, e.g. 0,1; got {text!r}") from None
    if not devices or any(d < 0 for d in devices):
        raise argparse.ArgumentTypeError(f"--devices takes non-negative integers, e.g. 0,1; got {text!r}")
    return devices


def main_control(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="hybridrl control", description="Ask a running trainer to move generation onto more devices "
        "(grow-rollout; default: the actor's devices) or to return borrowed ones (shrink-rollout; default: all). "
        "Applied at the next step boundary; see the trainer's log for the outcome.")
    parser.add_argument("run_dir", help="the run's trainer.default_local_dir (holds trainer.pid)")
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("--devices", type=_parse_devices, default=None,
                        help="comma-separated device ids (GPU indices; on CPU, rank ids)")
    args = parser.parse_args(argv)
    run_dir = os.path.abspath(os.path.expanduser(args.run_dir))
    action = COMMANDS[args.command]
    try:
        pid = _trainer_pid(run_dir)
    except RuntimeError as err:
        print(f"hybridrl control: {err}", file=sys.stderr)
        return 1
    path = write_request(run_dir, action, args.devices)
    try:
        os.kill(pid, getattr(signal, ACTION_SIGNALS[action]))
    except OSError as err:
        os.remove(path)
        print(f"hybridrl control: could not signal the trainer (pid {pid}): {err}", file=sys.stderr)
        return 1
    print(f"sent {args.command} (devices: {args.devices or 'default'}) to the trainer, pid {pid}: {path}")
    return 0
