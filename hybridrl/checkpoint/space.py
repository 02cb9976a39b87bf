"""Disk space for a save: an estimate checked before writing, and a disk-full error that says so.

Without this a full disk surfaced as torch's "enforce fail at inline_container.cc ... unexpected pos" and
left a hidden `.tmp_global_step_N` that kept the next start from running. Here a save first checks that
the folder has room for what it is about to write (the tensors' bytes, plus a margin for JSON, tokenizer
and config files), and a write that still fails for lack of space (another process filled the disk
meanwhile) raises a CheckpointError naming the folder, the bytes needed and the bytes free; the caller
removes the partial save.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from hybridrl.checkpoint.errors import CheckpointError

MARGIN_BYTES = 16 << 20  # JSON, manifest, config, tokenizer and generation-config files of one role
_FULL = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXT = ("No space left on device", "Disk quota exceeded", "os error 28", "unexpected pos")


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor inside `value` (nested dicts, lists, tuples)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def save_bytes(state: dict, contents: list[str]) -> int:
    """What saving `contents` of a role's `state` ({model, optimizer, lr_scheduler}) writes, roughly."""
    model = tensor_bytes(state.get("model", {}))
    total = MARGIN_BYTES
    total += model if "model" in contents else 0
    total += tensor_bytes(state.get("optimizer", {})) if "optimizer" in contents else 0
    total += model if "hf_model" in contents else 0  # the HF copy, at most the weights' size
    return total


def free_bytes(folder: str) -> int:
    return shutil.disk_usage(folder).free


def ensure_free_space(folder: str, needed: int) -> None:
    """Refuse a save that cannot fit, before writing anything."""
    free = free_bytes(folder)
    if free < needed:
        raise CheckpointError(no_space_message(folder, needed, free))


def no_space_message(folder: str, needed: int | None, free: int | None = None) -> str:
    """`needed` None: a small write (a folder, the tracker) failed; the disk is simply full."""
    free = free_bytes(folder) if free is None else free
    need = f"the save needs about {_size(needed)} and " if needed else ""
    return (f"no space left for the checkpoint in {folder}: {need}{_size(free)} are free. Free space there, point "
            f"trainer.default_local_dir at a larger disk, or keep fewer checkpoints "
            f"(trainer.max_actor_ckpt_to_keep / max_critic_ckpt_to_keep)")


def is_disk_full(err: BaseException) -> bool:
    """An OSError with ENOSPC/EDQUOT, or a library's wrapping of one (torch's zip writer, safetensors)."""
    if isinstance(err, OSError) and err.errno in _FULL:
        return True
    return any(text in str(err) for text in _FULL_TEXT)


@contextmanager
def disk_full_named(folder: str, needed: int | None = None) -> Iterator[None]:
    """Turn a write failing for lack of space into a CheckpointError that says so."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as err:
        if not is_disk_full(err):
            raise
        raise CheckpointError(no_space_message(_existing(folder), needed)) from err


def _existing(folder: str) -> str:
    while folder and not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    return folder or "."


def _size(num_bytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.1f} {unit}"
    return f"{num_bytes} bytes"
