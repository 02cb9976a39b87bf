"""Checkpoints in verl's layout: `<dir>/global_step_N/{actor,critic}/`, `data.pt`, and the tracker file.

A checkpoint is written into a temporary directory and renamed into place when complete; only then is
`latest_checkpointed_iteration.txt` replaced (write-then-rename), so a crash during a save never
leaves a "latest" that points at a partial checkpoint. Model weights are saved unsharded, so a
checkpoint resumes on any number of devices.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil

import numpy as np
import torch

TRACKER_FILE = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, or asked for in a way that cannot work."""


def rng_state() -> dict:
    state = {"cpu": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["cpu"])
    np.random.set_state(state["numpy"])
    random.setstate(state["random"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_role(role_dir: str, state: dict, contents: list[str]) -> None:
    """Write a worker's state ({model, optimizer, lr_scheduler}) split into verl-like files."""
    os.makedirs(role_dir, exist_ok=True)
    if "model" in contents:
        torch.save(state["model"], os.path.join(role_dir, "model.pt"))
    if "optimizer" in contents:
        torch.save(state["optimizer"], os.path.join(role_dir, "optim.pt"))
    if "extra" in contents:
        torch.save({"lr_scheduler": state["lr_scheduler"], "rng": rng_state()},
                   os.path.join(role_dir, "extra_state.pt"))


def load_role(role_dir: str, contents: list[str]) -> dict:
    state: dict = {}
    files = {"model": "model.pt", "optimizer": "optim.pt", "extra": "extra_state.pt"}
    for item in contents:
        if item not in files:
            continue
        path = os.path.join(role_dir, files[item])
        if not os.path.exists(path):
            raise CheckpointError(f"checkpoint file {path} is missing; it was saved without {item!r} in "
                                  f"checkpoint.save_contents. Set checkpoint.load_contents to what was saved.")
        state[item] = torch.load(path, map_location="cpu", weights_only=False)
    return state


def step_dirs(root: str) -> list[tuple[int, str]]:
    if not os.path.isdir(root):
        return []
    found = [(int(m.group(1)), os.path.join(root, name)) for name in os.listdir(root)
             if (m := STEP_DIR.match(name))]
    return sorted(found)


def begin_save(root: str, step: int) -> str:
    """A fresh temporary directory for step `step`'s checkpoint."""
    tmp = os.path.join(root, f".tmp_global_step_{step}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    return tmp


def commit_save(root: str, tmp_dir: str, step: int, trainer_state: dict, keep: int | None) -> str:
    """Move the finished checkpoint into place, then update the tracker file, then rotate."""
    with open(os.path.join(tmp_dir, "trainer_state.json"), "w") as f:
        json.dump(trainer_state, f)
    final = os.path.join(root, f"global_step_{step}")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp_dir, final)
    tracker_tmp = os.path.join(root, TRACKER_FILE + ".tmp")
    with open(tracker_tmp, "w") as f:
        f.write(str(step))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tracker_tmp, os.path.join(root, TRACKER_FILE))
    if keep is not None and keep > 0:
        for _, old in step_dirs(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


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
    tracker = os.path.join(root, TRACKER_FILE)
    if not os.path.exists(tracker):
        return None
    step = open(tracker).read().strip()
    path = os.path.join(root, f"global_step_{step}")
    if not os.path.isdir(path):
        raise CheckpointError(f"{tracker} names step {step} but {path} does not exist; delete the tracker file "
                              f"or set trainer.resume_mode=disable")
    return path


def read_trainer_state(step_dir: str) -> dict:
    with open(os.path.join(step_dir, "trainer_state.json")) as f:
        return json.load(f)
