"""The trainer with a user's dataset class (data.custom_cls), a curriculum sampler (data.sampler) and model.use_shm:
two steps on CPU, the sampler updated after each step, and resume equal to the uninterrupted run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import hybridrl.trainer.setup as trainer_setup
from hybridrl.models.shm import CACHE_DIR, ROOT_ENV
from tests.trainer.helpers import tiny_run_overrides
from tests.trainer.test_ppo_trainer import read_metrics, stable, train

USER_CLASSES = Path(__file__).resolve().parents[1] / "data" / "user_classes"
pytestmark = pytest.mark.skipif(not hasattr(trainer_setup, "build_rl_dataset"),
                                reason="trainer/setup.py does not build datasets through hybridrl.data.factory")
USER_DATA = [f"data.custom_cls.path={USER_CLASSES / 'verl_style.py'}", "data.custom_cls.name=RawPromptDataset",
             f"data.sampler.class_path={USER_CLASSES / 'verl_style.py'}",
             "data.sampler.class_name=ReplayFailuresCurriculum"]


def test_a_user_dataset_and_curriculum_train_and_resume_exactly(tmp_path, arith_model_dir, arithmetic_files,
                                                                monkeypatch):
    monkeypatch.setenv(ROOT_ENV, str(tmp_path / "shm"))
    (tmp_path / "shm").mkdir()
    common = USER_DATA + ["trainer.save_freq=2", "actor_rollout_ref.model.use_shm=true"]
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    trainer = train(tiny_run_overrides(arith_model_dir, arithmetic_files, straight, steps=4, extra=common))
    sampler = trainer.train_loader.order.sampler
    assert type(sampler).__name__ == "ReplayFailuresCurriculum" and sampler.updates == 4
    assert os.listdir(tmp_path / "shm" / CACHE_DIR)  # the actor loaded from its /dev/shm copy
    train(tiny_run_overrides(arith_model_dir, arithmetic_files, resumed, steps=2, extra=common))
    train(tiny_run_overrides(arith_model_dir, arithmetic_files, resumed, steps=4,
                             extra=common + ["trainer.resume_mode=auto"]))
    a, b = read_metrics(straight), read_metrics(resumed)
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b):
        assert stable(ra) == pytest.approx(stable(rb), rel=1e-6, abs=1e-7), ra["step"]
