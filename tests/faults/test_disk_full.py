"""A full disk during a save: the cause is named (no space, the folder, the bytes), the partial save is gone,
and the next start runs. On a real tmpfs of a few MiB, mounted in a child's private mount namespace."""

from __future__ import annotations

import re

import pytest

from tests.faults import runs

UNAVAILABLE = runs.private_tmpfs_unavailable()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")


def test_a_save_larger_than_the_disk_is_refused_by_name_and_leaves_nothing(tmp_path, overrides_for):
    disk = str(tmp_path / "disk")
    out = f"{disk}/run"
    result = runs.run(runs.train, (overrides_for(out, 1, ["trainer.save_freq=1"]),), str(tmp_path / "r.json"),
                      tmpfs=(disk, "4m"))
    assert not result["ok"] and result["type"] == "CheckpointError", result.get("traceback")
    assert re.match(rf"no space left for the checkpoint in {out}/.tmp_global_step_1/actor: the save needs about "
                    r"16\.\d MiB and [34]\.\d MiB are free\. Free space there, point trainer.default_local_dir at a "
                    r"larger disk", result["message"]), result["message"]
    assert not any(".tmp_global_step" in path for path in result["files"]), result["files"]
    assert "the save failed; its partial checkpoint " + f"{out}/.tmp_global_step_1 was removed" in result["log"]


def test_a_write_that_fills_the_disk_names_the_cause_not_torch(tmp_path):
    """The free-space check passes (the estimate counts tensors) and the write then hits ENOSPC for real."""
    disk = str(tmp_path / "disk")
    role_dir = f"{disk}/.tmp_global_step_3/actor"
    result = runs.run(runs.save_with_large_json, (role_dir, 24), str(tmp_path / "r.json"), tmpfs=(disk, "20m"))
    assert not result["ok"] and result["type"] == "CheckpointError", result.get("traceback")
    assert re.match(rf"no space left for the checkpoint in {role_dir}: the save needs about 16\.\d MiB",
                    result["message"]), result["message"]
    assert "inline_container" not in result["message"] and "No space left on device" in result["traceback"]


def test_the_next_start_removes_a_partial_save_that_filled_the_disk_and_runs(tmp_path, overrides_for):
    """The audit's state: a save killed while the disk filled left `.tmp_global_step_2` taking every byte; the
    restart died writing trainer.pid. Now the start names and removes it, writes trainer.pid and trains."""
    disk = str(tmp_path / "disk")
    out = f"{disk}/run"
    fill = (f"mkdir -p {out}/.tmp_global_step_2/actor && "
            f"(head -c 8388608 /dev/zero > {out}/.tmp_global_step_2/actor/model.safetensors || true)")
    result = runs.run(runs.train, (overrides_for(out, 2),), str(tmp_path / "r.json"), tmpfs=(disk, "4m"),
                      before=fill)
    assert result["ok"], result.get("traceback")
    assert any("removed 1 partial checkpoint(s) an interrupted save left in" in line for line in result["log"])
    assert not any("could not write" in line for line in result["log"])  # trainer.pid was written
    assert "run/metrics.jsonl" in result["files"] and not any(".tmp_global_step" in p for p in result["files"])


def test_a_full_disk_at_start_costs_the_pid_file_not_the_run(tmp_path):
    disk = str(tmp_path / "disk")
    fill = f"mkdir -p {disk}/run && (head -c 8388608 /dev/zero > {disk}/filler || true)"
    result = runs.run(runs.install_controller, (f"{disk}/run",), str(tmp_path / "r.json"), tmpfs=(disk, "1m"),
                      before=fill)
    assert result["ok"] and result["value"] is True, result.get("traceback")
    assert any(line.startswith(f"could not write {disk}/run/trainer.pid (No space left on device): `hybridrl control` "
                               "cannot reach this run") for line in result["log"]), result["log"]
    assert "run/trainer.pid" not in result["files"]
