"""Checkpoints in verl's layout: `<dir>/global_step_N/{actor,critic}/`, `data.json`, and the tracker file.

A checkpoint is written into a temporary directory (`.tmp_global_step_N`) and renamed into place when
complete; only then is `latest_checkpointed_iteration.txt` replaced (write-then-rename), so a crash during
a save never leaves a "latest" that points at a partial checkpoint; a failed save removes its partial
folder. Replacing a same-numbered checkpoint renames the old one aside first (`.replaced_global_step_N`),
so "latest" never names a folder that is gone. Model weights are saved unsharded, so a checkpoint resumes
on any number of devices. Files hold tensors (safetensors) and JSON only: `role_files`, `state_io`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from hybridrl.checkpoint.errors import CheckpointError
from hybridrl.checkpoint.role_files import load_role, rng_state, save_role, set_rng_state
from hybridrl.checkpoint.rotation import Retention, next_save_index, read_state, rotate, write_state
from hybridrl.checkpoint.space import disk_full_named
from hybridrl.checkpoint.state_io import load_legacy_pt, load_state, save_state
from hybridrl.logging.log import get_logger

__all__ = ["CheckpointError", "TRACKER_FILE", "begin_save", "commit_save", "discard_on_failure", "find_resume_dir",
           "load_data_state", "load_role", "read_trainer_state", "rng_state", "save_data_state", "save_role",
           "set_rng_state", "step_dirs"]

log = get_logger("hybridrl.checkpoint")
TRACKER_FILE = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")
TMP_PREFIX = ".tmp_global_step_"
REPLACED_PREFIX = ".replaced_global_step_"
DATA_STEM = "data"  # data.json: the train loader's position (format 1: data.pt)


def step_dirs(root: str) -> list[tuple[int, str]]:
    """Complete checkpoints in `root` as (step, path), by step."""
    if not os.path.isdir(root):
        return []
    found = [(int(m.group(1)), os.path.join(root, name)) for name in os.listdir(root)
             if (m := STEP_DIR.match(name))]
    return sorted(found)


def begin_save(root: str, step: int, retention: Retention | None = None, protect: Iterable[str] = ()) -> str:
    """A fresh temporary directory for step `step`'s checkpoint. With `retention`, older checkpoints are first
    rotated to make room (as verl: N - 1 kept for N >= 2), never the tracker's or those in `protect`."""
    os.makedirs(root, exist_ok=True)
    if retention is not None:
        rotate(step_dirs(root), retention, _protected(root, protect), before_save=True)
    tmp = os.path.join(root, f"{TMP_PREFIX}{step}")
    shutil.rmtree(tmp, ignore_errors=True)
    with disk_full_named(root):
        os.makedirs(tmp)
    return tmp


@contextmanager
def discard_on_failure(tmp_dir: str) -> Iterator[None]:
    """Remove the partial save `tmp_dir` when the save fails (the error goes on)."""
    try:
        yield
    except BaseException:
        if os.path.isdir(tmp_dir):
            shutil.rmtree(tmp_dir, ignore_errors=True)
            log.error("the save failed; its partial checkpoint %s was removed", tmp_dir)
        raise


def commit_save(root: str, tmp_dir: str, step: int, trainer_state: dict,
                keep: Retention | int | None = None, protect: Iterable[str] = ()) -> str:
    """Move the finished checkpoint into place, then update the tracker file, then rotate (`keep`: a Retention,
    or the actor's count). `trainer_state` gets the save's `save_index` (save order, for rotation)."""
    final = os.path.join(root, f"global_step_{step}")
    state = dict(trainer_state, save_index=next_save_index(step_dirs(root)))
    with disk_full_named(root):
        write_state(tmp_dir, state)
        _replace_dir(tmp_dir, final, os.path.join(root, f"{REPLACED_PREFIX}{step}"))
        _write_tracker(root, step)
    retention = keep if isinstance(keep, Retention) else Retention(actor=keep if keep and keep > 0 else None)
    rotate(step_dirs(root), retention, _protected(root, protect))
    return final


def _replace_dir(source: str, target: str, aside: str) -> None:
    """`source` becomes `target`; an existing `target` is renamed to `aside` first and removed after."""
    shutil.rmtree(aside, ignore_errors=True)
    if os.path.isdir(target):
        os.replace(target, aside)
    os.replace(source, target)
    shutil.rmtree(aside, ignore_errors=True)


def _write_tracker(root: str, step: int) -> None:
    tracker_tmp = os.path.join(root, TRACKER_FILE + ".tmp")
    with open(tracker_tmp, "w") as f:
        f.write(str(step))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tracker_tmp, os.path.join(root, TRACKER_FILE))


def _protected(root: str, protect: Iterable[str]) -> set[str]:
    """The tracker's checkpoint and `protect` (e.g. the one this run resumed from)."""
    kept = {p for p in protect if p}
    tracked = tracker_step(root)
    if tracked is not None:
        kept.add(os.path.join(root, f"global_step_{tracked}"))
    return kept


def tracker_step(root: str) -> str | None:
    tracker = os.path.join(root, TRACKER_FILE)
    if not os.path.exists(tracker):
        return None
    with open(tracker) as f:
        return f.read().strip()


def find_resume_dir(root: str, resume_mode: str, resume_from_path: str | None) -> str | None:
    """verl's resume rules: disable → None; auto → the tracker's step (None if absent); resume_path → given."""
    if resume_mode == "disable":
        return None
    if resume_mode == "resume_path":
        if not resume_from_path or not STEP_DIR.match(os.path.basename(os.path.normpath(resume_from_path))):
            raise CheckpointError(f"trainer.resume_mode=resume_path needs trainer.resume_from_path pointing at a "
                                  f"global_step_N directory (got {resume_from_path!r})")
        if not os.path.isdir(resume_from_path):
            raise CheckpointError(f"trainer.resume_from_path={resume_from_path!r} does not exist")
        return resume_from_path
    step = tracker_step(root)
    if step is None:
        return None
    path = os.path.join(root, f"global_step_{step}")
    aside = os.path.join(root, f"{REPLACED_PREFIX}{step}")
    if not os.path.isdir(path) and os.path.isdir(aside):  # the run stopped while replacing it: the old one is whole
        os.replace(aside, path)
        log.warning("%s was being replaced when the run stopped; resuming from the checkpoint it replaced", path)
    if not os.path.isdir(path):
        raise CheckpointError(f"{os.path.join(root, TRACKER_FILE)} names step {step} but {path} does not exist; "
                              f"delete the tracker file or set trainer.resume_mode=disable")
    return path


def read_trainer_state(step_dir: str) -> dict:
    state = read_state(step_dir)
    if "global_step" not in state:
        raise CheckpointError(f"{step_dir} has no readable trainer_state.json; it is not a complete hybridrl "
                              f"checkpoint: resume from another global_step_N")
    return state


def save_data_state(step_dir: str, state: dict) -> None:
    """The train loader's position (`data.json`)."""
    save_state(os.path.join(step_dir, DATA_STEM), state)


def load_data_state(step_dir: str) -> dict | None:
    """The train loader's position saved with the checkpoint (format 1: `data.pt`), or None when absent."""
    if os.path.exists(os.path.join(step_dir, DATA_STEM + ".json")):
        return load_state(os.path.join(step_dir, DATA_STEM))[0]
    legacy = os.path.join(step_dir, "data.pt")
    return load_legacy_pt(legacy) if os.path.exists(legacy) else None
