"""Work in child processes that a test can SIGKILL at any moment, started in milliseconds.

Children are forked from a forkserver that imported the trainer once (`context()` preloads this module),
so a kill chain of a dozen runs costs a dozen tiny trainings, not a dozen imports of torch and
transformers. A child reports how it ended in `result_path` (JSON: ok, the error's type and message, the
`hybridrl` log lines, and the files under its tmpfs); a killed child reports nothing. With `tmpfs`, the
child first enters a mount namespace of its own with a small tmpfs that only it sees (gone with it).
"""

from __future__ import annotations

import ctypes
import json
import logging
import multiprocessing as mp
import os
import subprocess
import traceback
from typing import Any, Callable

from hybridrl.config import load_config
from hybridrl.trainer.ppo_trainer import PPOTrainer

CLONE_NEWNS = 0x00020000
_CONTEXT = None
STARTED: set[int] = set()  # pids of every child started here (whose leftovers the suite checks)


def context():
    """The forkserver context, preloading this module (hence the trainer's imports) once per session."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = mp.get_context("forkserver")
        _CONTEXT.set_forkserver_preload([__name__])
    return _CONTEXT


def train(overrides: list[str]) -> None:
    PPOTrainer(load_config(overrides)).fit()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def in_child(target: Callable[..., Any], args: tuple, result_path: str, tmpfs: tuple[str, str] | None = None,
             before: str | None = None) -> None:
    """A child's body: optionally enter a private tmpfs (`(mount_point, size)`) and run the shell command
    `before` there, call `target(*args)`, then write how it ended."""
    lines = _Lines()
    logging.getLogger("hybridrl").addHandler(lines)
    result: dict[str, Any] = {"ok": False}
    try:
        if tmpfs is not None:
            enter_private_tmpfs(*tmpfs)
        if before:
            subprocess.run(before, shell=True, check=True)
        result["value"] = target(*args)
        result["ok"] = True
    except BaseException as err:  # the test reads what happened
        result.update(type=type(err).__name__, message=str(err), traceback=traceback.format_exc())
    result["log"] = lines.lines
    if tmpfs is not None:
        result["files"] = sorted(os.path.relpath(os.path.join(folder, name), tmpfs[0])
                                 for folder, dirs, files in os.walk(tmpfs[0]) for name in dirs + files)
    with open(result_path, "w") as f:
        json.dump(result, f)


def start(target: Callable[..., Any], args: tuple, result_path: str, **kwargs) -> mp.Process:
    proc = context().Process(target=in_child, args=(target, args, result_path), kwargs=kwargs)
    proc.start()
    STARTED.add(proc.pid)
    return proc


def run(target: Callable[..., Any], args: tuple, result_path: str, timeout_s: float = 300, **kwargs) -> dict:
    """Run to the end; how it ended."""
    proc = start(target, args, result_path, **kwargs)
    proc.join(timeout_s)
    if proc.is_alive():
        proc.kill()
        proc.join()
        raise AssertionError(f"the child did not end within {timeout_s}s")
    with open(result_path) as f:
        return json.load(f)


def enter_private_tmpfs(mount_point: str, size: str) -> None:
    """This process into a mount namespace of its own with a tmpfs of `size` at `mount_point`."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) failed")
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    os.makedirs(mount_point, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mount_point], check=True)


def private_tmpfs_unavailable() -> str | None:
    """None when a child can mount a private tmpfs here, else why not."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root (CAP_SYS_ADMIN); run as root to test a real full disk"
    script = "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d && umount $d; rmdir $d"
    try:
        probe = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
    except FileNotFoundError:
        return "the unshare command (util-linux) is not installed"
    if probe.returncode != 0:
        return f"this machine does not allow mounting a tmpfs in a private namespace: {probe.stderr.strip()}"
    return None


# ---------------------------------------------------------------- targets of single tests
def hold_a_worker_group(ready_path: str) -> None:
    """A controller with one spawned rank that waits to be killed (its rank then exits: the pipe closes)."""
    import time

    from hybridrl.distributed import LocalWorkerGroup
    from tests.distributed.toy_workers import ToyWorker

    group = LocalWorkerGroup(ToyWorker, {}, world_size=1, role="actor")
    with open(ready_path, "w") as f:
        json.dump({"log_dir": group.log_dir, "rank_pids": group.pids}, f)
    time.sleep(600)

def save_with_large_json(role_dir: str, json_mb: int) -> None:
    """save_role with a state whose JSON part (an LR-schedule entry) is about `json_mb` MiB: the free-space
    estimate counts tensors, so the check passes and the write itself hits the full disk."""
    import torch

    from hybridrl.checkpoint.role_files import save_role

    state = {"model": {"w": torch.ones(4)}, "optimizer": {"state": {}, "param_groups": []},
             "lr_scheduler": {"history": [0.123456789] * (json_mb * (1 << 20) // 13)}}
    save_role(role_dir, state, ["model", "optimizer", "extra"])


def install_controller(run_dir: str) -> bool:
    """What fit() does first: name an earlier run's leftovers, write trainer.pid."""
    from hybridrl.elastic.control import ElasticController

    controller = ElasticController(run_dir)
    try:
        return controller.install()
    finally:
        controller.close()
