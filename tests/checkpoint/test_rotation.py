"""Rotation keeps the newest saves by save order and never the checkpoints a resume depends on; the tracker
only ever names a complete checkpoint."""

from __future__ import annotations

import logging
import os

import pytest

from hybridrl.checkpoint.errors import CheckpointError
from hybridrl.checkpoint.manager import TRACKER_FILE, begin_save, commit_save, find_resume_dir, step_dirs
from hybridrl.checkpoint.role_files import load_role
from hybridrl.checkpoint.rotation import Retention, existing_checkpoints_line, read_state


def save(root, step: int, retention: Retention = Retention(), protect=(), marker: str = "") -> str:
    tmp = begin_save(str(root), step, retention, protect)
    os.makedirs(os.path.join(tmp, "critic"))
    with open(os.path.join(tmp, "marker"), "w") as f:
        f.write(marker)
    return commit_save(str(root), tmp, step, {"global_step": step}, keep=retention, protect=protect)


def steps(root) -> list[int]:
    return [step for step, _ in step_dirs(str(root))]


def tracker(root) -> str:
    return (root / TRACKER_FILE).read_text()


def test_keeps_the_newest_saves_not_the_highest_steps(tmp_path):
    """resume_path to an earlier step, then saves: the old higher steps are older saves and go first; the
    checkpoint resumed from stays; the next auto-resume finds the newest save."""
    keep = Retention(actor=2)
    for step in (2, 4, 6):
        save(tmp_path, step, keep)
    assert steps(tmp_path) == [4, 6]
    resumed_from = [str(tmp_path / "global_step_4")]
    save(tmp_path, 5, keep, resumed_from, marker="second run")
    assert steps(tmp_path) == [4, 5, 6] and tracker(tmp_path) == "5"
    save(tmp_path, 6, keep, resumed_from, marker="second run")  # replaces the first run's step 6
    assert steps(tmp_path) == [4, 5, 6] and tracker(tmp_path) == "6"
    save(tmp_path, 7, keep, resumed_from, marker="second run")
    assert steps(tmp_path) == [4, 6, 7]  # 4: resumed from; 6, 7: the two newest saves
    newest = find_resume_dir(str(tmp_path), "auto", None)
    assert newest.endswith("global_step_7") and open(os.path.join(newest, "marker")).read() == "second run"
    assert (tmp_path / "global_step_6" / "marker").read_text() == "second run"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temporary or replaced folders left


def test_a_fresh_run_in_a_used_folder(tmp_path):
    """The old run's higher steps never delete the new run's saves (the audit: every new save was deleted)."""
    for step in (2, 4, 6):
        save(tmp_path, step)
    keep = Retention(actor=2)
    line = existing_checkpoints_line(step_dirs(str(tmp_path)), str(tmp_path), keep)
    assert line.startswith(f"trainer.resume_mode=disable: {tmp_path} already holds 3 checkpoint(s) (steps 2, 4, 6)")
    assert "rotation (trainer.max_actor_ckpt_to_keep=2) deletes them as this run saves" in line
    assert "they are kept (no rotation)" in existing_checkpoints_line(step_dirs(str(tmp_path)), str(tmp_path),
                                                                      Retention())
    save(tmp_path, 1, keep)
    assert tracker(tmp_path) == "1" and 1 in steps(tmp_path)
    save(tmp_path, 2, keep)
    assert steps(tmp_path) == [1, 2] and tracker(tmp_path) == "2"
    assert read_state(str(tmp_path / "global_step_2"))["save_index"] > read_state(str(tmp_path / "global_step_1"))[
        "save_index"]


def test_keep_one_holds_the_previous_checkpoint_until_the_new_one_is_complete(tmp_path):
    keep = Retention(actor=1)
    save(tmp_path, 1, keep)
    tmp = begin_save(str(tmp_path), 2, keep)
    assert steps(tmp_path) == [1] and find_resume_dir(str(tmp_path), "auto", None).endswith("global_step_1")
    commit_save(str(tmp_path), tmp, 2, {"global_step": 2}, keep=keep)
    assert steps(tmp_path) == [2]


def test_keep_n_makes_room_before_the_save(tmp_path):
    keep = Retention(actor=3)
    for step in (1, 2, 3):
        save(tmp_path, step, keep)
    begin_save(str(tmp_path), 4, keep)  # as verl: N - 1 kept while the N-th is written
    assert steps(tmp_path) == [2, 3]


def test_the_tracker_checkpoint_is_never_removed(tmp_path):
    for step in (1, 2, 3):
        save(tmp_path, step)
    (tmp_path / TRACKER_FILE).write_text("1")  # e.g. a checkpoint copied in by hand and named latest
    save(tmp_path, 4, Retention(actor=1), protect=())
    assert steps(tmp_path) == [4]  # the tracker moved on to 4 before rotation, so 1 was no longer protected
    (tmp_path / TRACKER_FILE).write_text("4")
    begin_save(str(tmp_path), 5, Retention(actor=2))
    assert steps(tmp_path) == [4]


def test_fewer_critic_checkpoints_drop_only_the_critic_and_say_so(tmp_path):
    keep = Retention(actor=3, critic=1)
    for step in (1, 2, 3):
        save(tmp_path, step, keep)
    assert steps(tmp_path) == [1, 2, 3]
    assert [os.path.isdir(tmp_path / f"global_step_{s}" / "critic") for s in (1, 2, 3)] == [False, False, True]
    assert read_state(str(tmp_path / "global_step_2"))["removed_roles"] == ["critic"]
    with pytest.raises(CheckpointError, match=r"holds no critic state \(saved by a run without a critic, or removed "
                                              r"by trainer.max_critic_ckpt_to_keep\)"):
        load_role(str(tmp_path / "global_step_2" / "critic"), ["model"])


def test_a_run_stopped_while_replacing_a_checkpoint_resumes_from_the_replaced_one(tmp_path, caplog):
    save(tmp_path, 4, marker="first")
    os.replace(tmp_path / "global_step_4", tmp_path / ".replaced_global_step_4")  # killed between the two renames
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        path = find_resume_dir(str(tmp_path), "auto", None)
    assert open(os.path.join(path, "marker")).read() == "first" and "was being replaced" in caplog.text
