"""checkpoint/space.py: the save's size estimate, the free-space check, and disk-full errors that say so."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from hybridrl.checkpoint.errors import CheckpointError
from hybridrl.checkpoint.space import (MARGIN_BYTES, disk_full_named, ensure_free_space, is_disk_full, save_bytes,
                                       tensor_bytes)


def test_the_estimate_counts_what_the_parts_write():
    state = {"model": {"w": torch.zeros(10, 10), "b": torch.zeros(10, dtype=torch.bfloat16)},
             "optimizer": {"state": {0: {"exp_avg": torch.zeros(100), "step": torch.tensor(1.0)}}, "param_groups": []},
             "lr_scheduler": {"last_epoch": 3}}
    model, optimizer = 400 + 20, 400 + 4
    assert tensor_bytes(state["model"]) == model and tensor_bytes(state["optimizer"]) == optimizer
    assert save_bytes(state, ["model"]) == MARGIN_BYTES + model
    assert save_bytes(state, ["model", "optimizer", "extra", "hf_model"]) == MARGIN_BYTES + 2 * model + optimizer


def test_a_save_that_cannot_fit_is_refused_before_writing(tmp_path):
    with pytest.raises(CheckpointError) as caught:
        ensure_free_space(str(tmp_path), 1 << 60)
    message = str(caught.value)
    assert f"no space left for the checkpoint in {tmp_path}: the save needs about 1073741824.0 GiB" in message
    assert "are free" in message and "trainer.default_local_dir" in message and "max_actor_ckpt_to_keep" in message
    ensure_free_space(str(tmp_path), 1)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device whose writes fail ENOSPC)")
def test_a_write_that_hits_a_full_disk_names_the_folder_and_the_bytes(tmp_path):
    with pytest.raises(CheckpointError, match=rf"no space left for the checkpoint in {tmp_path}: the save needs about "
                                              r"2.0 MiB") as caught:
        with disk_full_named(str(tmp_path / "global_step_3" / "actor"), 2 << 20):  # not created yet: its parent
            with open("/dev/full", "wb") as f:
                f.write(b"x" * 65536)
                f.flush()
    assert isinstance(caught.value.__cause__, OSError) and caught.value.__cause__.errno == errno.ENOSPC


def test_what_counts_as_a_full_disk():
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert is_disk_full(RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 192 vs 102"))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    with pytest.raises(PermissionError):  # anything else goes through unchanged
        with disk_full_named("x", 1):
            raise PermissionError(errno.EACCES, "Permission denied")
