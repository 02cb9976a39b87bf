"""Rotation in real runs (issue #27 item 2): resume_path to an earlier step, a fresh run in a used folder, and
the next auto-resume finding the newest save. The audit saw every new save deleted at once in both cases."""

from __future__ import annotations

import logging
import os

from hybridrl.checkpoint.manager import TRACKER_FILE, step_dirs
from hybridrl.config import load_config
from hybridrl.trainer.ppo_trainer import PPOTrainer

KEEP_TWO = ["trainer.save_freq=1", "trainer.max_actor_ckpt_to_keep=2"]


def train(overrides: list[str]) -> PPOTrainer:
    trainer = PPOTrainer(load_config(overrides))
    trainer.fit()
    return trainer


def steps(out) -> list[int]:
    return [step for step, _ in step_dirs(str(out))]


def tracker(out) -> str:
    return (out / TRACKER_FILE).read_text()


def test_resume_path_to_an_earlier_step_then_saves(tmp_path, overrides_for, caplog):
    out = tmp_path / "run"
    train(overrides_for(out, 4, KEEP_TWO))
    assert steps(out) == [3, 4]
    earlier = ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={out}/global_step_3"]
    train(overrides_for(out, 5, KEEP_TWO + earlier))
    assert steps(out) == [3, 4, 5] and tracker(out) == "5"  # 3: resumed from; 4 (this run's) and 5: the newest
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        trainer = train(overrides_for(out, 6, KEEP_TWO))  # auto
    assert f"resumed from {out}/global_step_5: continuing at step 6" in caplog.text
    assert trainer.global_step == 6 and steps(out) == [5, 6] and tracker(out) == "6"


def test_a_fresh_run_in_a_used_folder_says_what_happens_and_keeps_its_saves(tmp_path, overrides_for, caplog):
    out = tmp_path / "run"
    train(overrides_for(out, 4, KEEP_TWO))
    with caplog.at_level(logging.WARNING, logger="hybridrl"):
        train(overrides_for(out, 2, KEEP_TWO + ["trainer.resume_mode=disable"]))
    lines = [r.getMessage() for r in caplog.records if "trainer.resume_mode=disable" in r.getMessage()]
    assert len(lines) == 1 and f"{out} already holds 2 checkpoint(s) (steps 3, 4) that this run does not resume" in \
        lines[0] and "deletes them as this run saves" in lines[0]
    assert steps(out) == [1, 2] and tracker(out) == "2"
    trainer = train(overrides_for(out, 3, KEEP_TWO))
    assert trainer.global_step == 3 and steps(out) == [2, 3]


def test_keep_one_with_a_critic(tmp_path, overrides_for):
    out = tmp_path / "run"
    train(overrides_for(out, 3, ["trainer.save_freq=1", "trainer.max_actor_ckpt_to_keep=1",
                                 "trainer.max_critic_ckpt_to_keep=1", "algorithm.adv_estimator=gae"]))
    assert steps(out) == [3] and os.path.isdir(out / "global_step_3" / "critic")
