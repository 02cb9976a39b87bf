"""What a start finds in its run folder, said in one line each: leftovers of a run that did not end cleanly
(a stale `trainer.pid`, partial saves `.tmp_global_step_*`, rank-log folders kept in the temp directory)
and, for a fresh run, the checkpoints already there.

Partial saves are removed (a partial save can never be resumed, and on a full disk it is what keeps the
next start from running); rank logs are only named (they hold a failed run's last words: read, then delete).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

from hybridrl.checkpoint.manager import TRACKER_FILE, step_dirs
from hybridrl.checkpoint.pid_file import PID_FILE, PidRecord, process_identity, read_pid_file
from hybridrl.checkpoint.rotation import Retention, existing_checkpoints_line
from hybridrl.logging.log import get_logger
from hybridrl.utils.processes import process_alive

log = get_logger("hybridrl.checkpoint")
PARTIAL_PREFIXES = (".tmp_global_step_", ".replaced_global_step_")
RANK_LOGS = re.compile(r"^hybridrl-(?P<role>.+)-(?P<pid>\d+)-[^-]+$")  # distributed.local_launcher's log folders


def started_after(pid: int, since: float) -> bool:
    """Linux: whether process `pid` started after `since` (epoch s), i.e. the pid was reused after the process
    that wrote a pid file died. False where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return boot + start_ticks / os.sysconf("SC_CLK_TCK") > since + 2.0  # btime has 1 s resolution


@dataclass
class Leftovers:
    """What an earlier run left in a run folder and the temp directory."""

    stale_pid: int | None = None  # trainer.pid of a process that is gone
    live_pid: int | None = None  # trainer.pid of a process still running (another trainer in this folder?)
    partial_saves: list[str] = field(default_factory=list)
    rank_logs: list[str] = field(default_factory=list)


def find_leftovers(run_dir: str) -> Leftovers:
    found = Leftovers(rank_logs=stale_rank_logs())
    pid_path = os.path.join(run_dir, PID_FILE)
    try:
        record = read_pid_file(pid_path)
    except (OSError, ValueError):
        record = None
    if record is not None and record.pid != os.getpid():
        if still_running(record, os.path.getmtime(pid_path)):
            found.live_pid = record.pid
        else:
            found.stale_pid = record.pid
    if os.path.isdir(run_dir):
        found.partial_saves = sorted(os.path.join(run_dir, name) for name in os.listdir(run_dir)
                                     if name.startswith(PARTIAL_PREFIXES))
    return found


def still_running(record: PidRecord, written: float) -> bool:
    """Whether the process that wrote a pid file (at `written`, epoch s) still runs: its identity when the file
    has one, else (a file of an earlier version) a live pid that did not start after the file was written."""
    if record.identity is not None:
        return process_identity(record.pid) == record.identity
    return process_alive(record.pid) and not started_after(record.pid, written)


def rank_log_folders(owner: int | None = None) -> list[str]:
    """Rank-log folders in the temp directory (of the controller process `owner`, or of any)."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted(os.path.join(root, name) for name in names if (m := RANK_LOGS.match(name))
                  and (owner is None or int(m.group("pid")) == owner) and os.path.isdir(os.path.join(root, name)))


def stale_rank_logs() -> list[str]:
    """Rank-log folders whose controller process is gone: kept because a rank failed or the run was killed."""
    return [path for path in rank_log_folders()
            if not process_alive(int(RANK_LOGS.match(os.path.basename(path)).group("pid")))]


def report_leftovers(run_dir: str) -> Leftovers:
    """Name an earlier run's leftovers (one line per kind) and remove its partial saves."""
    found = find_leftovers(run_dir)
    if found.stale_pid is not None:
        log.warning("%s names pid %d, which is gone: the previous run there did not end cleanly (killed, or out "
                    "of memory); this run replaces the file", os.path.join(run_dir, PID_FILE), found.stale_pid)
    if found.live_pid is not None:
        log.warning("%s names pid %d, which is running: if it is another trainer using this "
                    "trainer.default_local_dir, stop one of them (two runs in one folder overwrite each other's "
                    "checkpoints)", os.path.join(run_dir, PID_FILE), found.live_pid)
    if found.partial_saves and found.live_pid is not None:
        log.warning("partial checkpoints in %s (%s) are left alone while pid %d runs", run_dir,
                    ", ".join(os.path.basename(p) for p in found.partial_saves), found.live_pid)
    elif found.partial_saves:
        for path in found.partial_saves:
            shutil.rmtree(path, ignore_errors=True)
        log.warning("removed %d partial checkpoint(s) an interrupted save left in %s: %s", len(found.partial_saves),
                    run_dir, ", ".join(os.path.basename(p) for p in found.partial_saves))
    if found.rank_logs:
        log.warning("rank logs of %d earlier run(s) that failed or were killed are kept in the temp directory: %s; "
                    "read them, then delete them", len(found.rank_logs), ", ".join(found.rank_logs))
    return found


def announce_start(root: str, cfg: Any, resume_dir: str | None) -> None:
    """A fresh run in a used folder: what happens to the checkpoints there. A resume that does not read the
    weights, or a folder with checkpoints but no tracker: said too. `cfg`: the run's HybridRLConfig."""
    existing = step_dirs(root)
    mode = cfg.trainer.resume_mode
    if mode == "disable":
        line = existing_checkpoints_line(existing, root, Retention.from_config(cfg))
        if line:
            log.warning(line)
    elif resume_dir is None and existing:
        log.warning("%s holds checkpoints (steps %s) but no %s (no save there completed its tracker): starting from "
                    "step 1; to continue one, set trainer.resume_mode=resume_path and trainer.resume_from_path",
                    root, ", ".join(str(s) for s, _ in existing[-3:]), TRACKER_FILE)
    if resume_dir is not None and "model" not in cfg.actor_rollout_ref.actor.checkpoint.load_contents:
        log.warning("resuming from %s without the actor's weights (actor_rollout_ref.actor.checkpoint.load_contents="
                    "%s): the actor starts from actor_rollout_ref.model.path", resume_dir,
                    list(cfg.actor_rollout_ref.actor.checkpoint.load_contents))
