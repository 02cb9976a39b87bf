"""The trainer with a user's dataset class (data.custom_cls), a curriculum sampler (data.sampler) and use_shm:
real CPU runs that show each key has an effect: the class's rows are trained on, the sampler is updated after each
step and resumes exactly, and every role loads its model (and the loader its files) from the /dev/shm copy."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hybridrl.data.verl_rows import VerlRows
from hybridrl.models.shm import CACHE_DIR, MANIFEST, ROOT_ENV
from tests.trainer.helpers import local_worker, tiny_run_overrides
from tests.trainer.test_ppo_trainer import read_metrics, stable, train

USER_CLASSES = Path(__file__).resolve().parents[1] / "data" / "user_classes"
USER_DATA = [f"data.custom_cls.path={USER_CLASSES / 'verl_style.py'}", "data.custom_cls.name=RawPromptDataset",
             f"data.sampler.class_path={USER_CLASSES / 'verl_style.py'}",
             "data.sampler.class_name=ReplayFailuresCurriculum"]


@pytest.fixture
def shm_root(tmp_path, monkeypatch) -> Path:
    """A stand-in for /dev/shm (HYBRIDRL_SHM_ROOT), so the test neither needs nor fills the host's."""
    root = tmp_path / "shm"
    root.mkdir()
    monkeypatch.setenv(ROOT_ENV, str(root))
    return root


def _copied_sources(shm_root: Path) -> set[str]:
    cache = shm_root / CACHE_DIR
    return {json.loads((cache / entry / MANIFEST).read_text())["source"] for entry in os.listdir(cache)
            if (cache / entry / MANIFEST).exists()}


def test_a_user_dataset_and_curriculum_train_and_resume_exactly(tmp_path, arith_model_dir, arithmetic_files,
                                                                shm_root):
    common = USER_DATA + ["trainer.save_freq=2", "actor_rollout_ref.model.use_shm=true"]
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    trainer = train(tiny_run_overrides(arith_model_dir, arithmetic_files, straight, steps=4, extra=common))
    dataset = trainer.train_loader.dataset
    assert isinstance(dataset, VerlRows) and type(dataset.inner).__name__ == "RawPromptDataset"
    assert type(trainer.val_loader.dataset.inner).__name__ == "RawPromptDataset"
    sampler = trainer.train_loader.order.sampler
    assert type(sampler).__name__ == "ReplayFailuresCurriculum" and sampler.updates == 4
    assert sampler.position < 4 * 8  # failed rows were drawn again, so fewer new rows than 4 batches of 8
    train(tiny_run_overrides(arith_model_dir, arithmetic_files, resumed, steps=2, extra=common))
    again = train(tiny_run_overrides(arith_model_dir, arithmetic_files, resumed, steps=4,
                                     extra=common + ["trainer.resume_mode=auto"]))
    assert again.train_loader.order.sampler.state_dict() == sampler.state_dict()
    a, b = read_metrics(straight), read_metrics(resumed)
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b):
        assert stable(ra) == pytest.approx(stable(rb), rel=1e-6, abs=1e-7), ra["step"]


def test_every_role_loads_from_its_shm_copy_and_the_loader_reads_copied_files(tmp_path, arith_model_dir,
                                                                              arithmetic_files, shm_root):
    critic_dir = tmp_path / "critic_model"
    critic_dir.mkdir()
    for name in os.listdir(arith_model_dir):
        (critic_dir / name).write_bytes((Path(arith_model_dir) / name).read_bytes())
    trainer = train(tiny_run_overrides(arith_model_dir, arithmetic_files, str(tmp_path / "run"), algo="gae", steps=1,
                                       extra=["actor_rollout_ref.model.use_shm=true", "critic.model.use_shm=true",
                                              f"critic.model.path={critic_dir}", "data.use_shm=true",
                                              "actor_rollout_ref.actor.use_kl_loss=true"]))
    cache = str(shm_root / CACHE_DIR)
    assert _copied_sources(shm_root) == {arith_model_dir, str(critic_dir), *arithmetic_files}
    worker = local_worker(trainer)
    for role, source in ((worker.actor, arith_model_dir), (worker.reference, arith_model_dir),
                         (worker.critic, str(critic_dir))):
        loaded_from = role.model.config._name_or_path
        assert loaded_from.startswith(cache) and loaded_from.endswith(os.path.basename(source)), loaded_from
    assert all(file.startswith(cache) for file in trainer.train_loader.dataset.files)
