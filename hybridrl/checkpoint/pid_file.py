"""`<run_dir>/trainer.pid`: which process runs the trainer of a run folder, in a form that cannot name another one.

A pid alone is not an identity: once the trainer is gone the kernel hands its number to the next process, and a
file written by hand can name anything. The file therefore holds the pid and the process's identity, the boot id
and the start time in clock ticks since boot (/proc/<pid>/stat, field 22): together they name one process for the
machine's lifetime. `hybridrl control` signals the pid only when the process running under it now has that
identity; a start names an earlier run's file stale when its process is gone or is another one.

Format: the pid on the first line (what earlier versions wrote, and all they wrote), the identity on the second.
Torch-free and light: the CLI's `control` command and the trainer's signal set-up import it early.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

PID_FILE = "trainer.pid"


@dataclass(frozen=True)
class PidRecord:
    """What a pid file says."""

    pid: int
    identity: str | None  # "<boot id>:<start ticks>"; None in a file without one (by hand, or an earlier version)


def process_identity(pid: int) -> str | None:
    """`<boot id>:<start ticks>` of live process `pid` (Linux), None when /proc cannot tell (the process is gone,
    or this system has no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            start_ticks = f.read().rsplit(")", 1)[1].split()[19]  # after the command name, which may hold spaces
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot_id = f.read().strip()
    except (OSError, IndexError):
        return None
    return f"{boot_id}:{start_ticks}"


def write_pid_file(path: str) -> None:
    """This process's pid and identity, written atomically (tmp + rename); an OSError (e.g. a full disk) leaves
    no temporary file behind and is the caller's to report."""
    tmp = f"{path}.{os.getpid()}.tmp"
    identity = process_identity(os.getpid()) or ""
    try:
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()}\n{identity}\n")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def read_pid_file(path: str) -> PidRecord:
    """The record in `path`; FileNotFoundError when there is none, ValueError when it holds no pid."""
    with open(path) as f:
        lines = f.read().split()
    if not lines or not lines[0].isdigit():
        raise ValueError(f"{path} does not hold a process id")
    return PidRecord(int(lines[0]), lines[1] if len(lines) > 1 else None)


def remove_own_pid_file(path: str) -> None:
    """Remove `path` if this process wrote it (another trainer may have replaced it since)."""
    with contextlib.suppress(OSError, ValueError):
        if read_pid_file(path).pid == os.getpid():
            os.remove(path)
