"""One role's part of a checkpoint (`global_step_N/actor/`, `.../critic/`): write, read, restore, verify.

Files (format 2): `model.safetensors` (weights), `optim.json` + `optim.safetensors` (optimizer state),
`extra_state.json` + `extra_state.safetensors` (LR schedule and RNG states), `manifest.json` (what was
saved, tensor shapes and checksums), and `huggingface/` (config, tokenizer; the weights too with
`hf_model`). Format-1 checkpoints (`model.pt`, `optim.pt`, `extra_state.pt`) of earlier versions still
resume, read with torch's weights-only unpickler (`state_io.load_legacy_pt`).
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch

from hybridrl.checkpoint.errors import CheckpointError
from hybridrl.checkpoint.manifest import (describe_tensors, read_manifest, verify_read, verify_restored,
                                          write_manifest)
from hybridrl.checkpoint.space import disk_full_named, ensure_free_space, save_bytes
from hybridrl.checkpoint.state_io import load_legacy_pt, load_state, load_tensors, save_state, save_tensors
from hybridrl.config.checkpoint_rules import CONTENTS, RESUMABLE, ROLES

MODEL_FILE = "model.safetensors"
STEMS = {"optimizer": "optim", "extra": "extra_state"}
LEGACY_FILES = {"model": "model.pt", "optimizer": "optim.pt", "extra": "extra_state.pt"}


def rng_state() -> dict:
    state = {"cpu": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["cpu"])
    np.random.set_state(tuple(state["numpy"]))  # type: ignore[arg-type]
    random.setstate(_as_tuples(state["random"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuples(value: Any) -> Any:
    """random.setstate wants (version, tuple of ints, gauss): nested tuples, as getstate gave them."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def save_role(role_dir: str, state: dict, contents: list[str]) -> None:
    """Write a worker's state ({model, optimizer, lr_scheduler}), the parts `contents` names, and its manifest.
    Checks the disk has room first; a write that fails for lack of space names the folder and the bytes."""
    unknown = [name for name in contents if name not in CONTENTS]
    if unknown:  # validate_config refuses these; a direct caller gets the same answer
        raise CheckpointError(f"unknown checkpoint part(s) {unknown}; the parts are {list(CONTENTS)}")
    needed = save_bytes(state, contents)
    with disk_full_named(role_dir, needed):
        os.makedirs(role_dir, exist_ok=True)
    ensure_free_space(role_dir, needed)
    tensors: dict[str, dict] = {}
    with disk_full_named(role_dir, needed):
        if "model" in contents:
            save_tensors(os.path.join(role_dir, MODEL_FILE), state["model"])
            tensors["model"] = describe_tensors(state["model"])
        if "optimizer" in contents:
            written = save_state(os.path.join(role_dir, STEMS["optimizer"]), state["optimizer"])
            tensors["optimizer"] = describe_tensors(written)
        if "extra" in contents:
            written = save_state(os.path.join(role_dir, STEMS["extra"]),
                                 {"lr_scheduler": state["lr_scheduler"], "rng": rng_state()})
            tensors["extra"] = describe_tensors(written)
        write_manifest(role_dir, contents, tensors)


def load_role(role_dir: str, contents: list[str]) -> dict:
    """The parts of `contents` a resume reads ({model, optimizer, extra}), checked against the manifest.
    A part the checkpoint lacks fails by name: nothing asked for is skipped."""
    role = os.path.basename(os.path.normpath(role_dir))
    wanted = [name for name in contents if name in RESUMABLE]
    if not os.path.isdir(role_dir):
        raise CheckpointError(f"{role_dir} does not exist: {os.path.dirname(role_dir)} holds no {role} state (saved "
                              f"by a run without a {role}, or removed by trainer.max_{role}_ckpt_to_keep); resume "
                              f"from another global_step_N or with trainer.resume_mode=disable")
    manifest = read_manifest(role_dir)
    if manifest is None:
        return _load_legacy(role_dir, wanted)
    missing = [name for name in wanted if name not in manifest["contents"]]
    if missing:
        key = ROLES.get(role, "checkpoint")
        raise CheckpointError(f"{role_dir} was saved with save_contents={manifest['contents']} and lacks {missing}, "
                              f"which {key}.load_contents={list(contents)} asks for; set {key}.load_contents to what "
                              f"was saved to resume only that, or resume from a checkpoint saved with {missing}")
    state: dict[str, Any] = {}
    if "model" in wanted:
        path = os.path.join(role_dir, MODEL_FILE)
        state["model"] = _read_tensors(path)
        verify_read(path, manifest["tensors"]["model"], state["model"])
    for name in ("optimizer", "extra"):
        if name in wanted:
            stem = os.path.join(role_dir, STEMS[name])
            state[name], read = load_state(stem)
            verify_read(stem + ".safetensors", manifest["tensors"][name], read)
    return state


def _read_tensors(path: str) -> dict[str, torch.Tensor]:
    if not os.path.exists(path):
        raise CheckpointError(f"{path} is missing although the manifest lists it; the checkpoint is damaged: resume "
                              f"from another global_step_N")
    return load_tensors(path)


def _load_legacy(role_dir: str, wanted: list[str]) -> dict:
    """A format-1 checkpoint: one `.pt` per part, read without running pickled code."""
    state = {}
    for name in wanted:
        path = os.path.join(role_dir, LEGACY_FILES[name])
        if not os.path.exists(path):
            raise CheckpointError(f"checkpoint file {path} is missing; it was saved without {name!r} in "
                                  f"checkpoint.save_contents. Set checkpoint.load_contents to what was saved.")
        state[name] = load_legacy_pt(path)
    return state


def restore_role(worker: Any, role_dir: str, contents: list[str]) -> None:
    """Load a role's checkpoint into `worker` (`load_checkpoint_state`), restore the RNG, then read the weights
    back (`worker.state_dict()`, collective on ranks: rank 0 gets them) and check they are the saved ones."""
    state = load_role(role_dir, contents)
    manifest = read_manifest(role_dir)
    worker.load_checkpoint_state(state)
    if "extra" in state:
        set_rng_state(state["extra"]["rng"])
    loaded_model = "model" in state
    del state  # the verification gathers the weights again: not twice in memory
    if manifest is None or not loaded_model:
        return
    restored = worker.state_dict()["model"]
    if restored:  # {} on ranks other than 0
        verify_restored(role_dir, manifest["tensors"]["model"], restored)


def has_model_weights(role_dir: str) -> bool:
    return any(os.path.exists(os.path.join(role_dir, name)) for name in (MODEL_FILE, LEGACY_FILES["model"]))


def read_model_weights(role_dir: str) -> dict[str, torch.Tensor]:
    """A role folder's saved weights (either format), checked against the manifest, for export."""
    return load_role(role_dir, ["model"])["model"]
