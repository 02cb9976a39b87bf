"""Checkpoint layout, atomic tracker, rotation and HF export round trip."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from hybridrl.checkpoint.export_cli import main as export_main
from hybridrl.checkpoint.manager import CheckpointError, begin_save, commit_save, find_resume_dir, step_dirs
from hybridrl.config import load_config
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.trainer.helpers import local_worker, tiny_run_overrides


def test_tracker_written_only_after_commit_and_rotation(tmp_path):
    root = str(tmp_path)
    tmp = begin_save(root, 1)
    assert find_resume_dir(root, "auto", None) is None, "an unfinished save must not be resumable"
    for step in (1, 2, 3):
        tmp = begin_save(root, step)
        open(os.path.join(tmp, "marker"), "w").close()
        commit_save(root, tmp, step, {"global_step": step}, keep=2)
    assert [s for s, _ in step_dirs(root)] == [2, 3]
    assert find_resume_dir(root, "auto", None).endswith("global_step_3")
    assert find_resume_dir(root, "disable", None) is None
    with pytest.raises(CheckpointError, match="global_step_N"):
        find_resume_dir(root, "resume_path", str(tmp_path))


def test_export_reproduces_actor_logits(tmp_path, arith_model_dir, arithmetic_files):
    out = str(tmp_path / "run")
    cfg = load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out,
                                         extra=["trainer.save_freq=2",
                                                "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]"]))
    trainer = PPOTrainer(cfg)
    trainer.fit()
    step_dir = os.path.join(out, "global_step_2")
    assert os.path.exists(os.path.join(step_dir, "actor", "huggingface", "model.safetensors"))
    target = str(tmp_path / "exported")
    assert export_main([step_dir, target]) == 0
    exported = AutoModelForCausalLM.from_pretrained(target)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        expected = local_worker(trainer).actor.model.eval()(ids).logits
        assert torch.allclose(exported(ids).logits, expected, atol=1e-5)
    assert os.path.exists(os.path.join(target, "tokenizer_config.json"))
    from_run = str(tmp_path / "exported_from_run")
    assert export_main([out, from_run]) == 0  # the checkpoint folder itself: its latest step
    with torch.no_grad():
        assert torch.equal(AutoModelForCausalLM.from_pretrained(from_run)(ids).logits, exported(ids).logits)


def test_export_names_a_missing_path_and_a_folder_with_no_completed_save(tmp_path, capsys):
    assert export_main([str(tmp_path / "no_such_run"), str(tmp_path / "out")]) == 2
    assert "'" + str(tmp_path / "no_such_run") + "' does not exist" in capsys.readouterr().err
    begin_save(str(tmp_path), 3)  # a save that never completed...
    os.makedirs(tmp_path / "global_step_3")  # ...and a step folder without a tracker file
    assert export_main([str(tmp_path), str(tmp_path / "out")]) == 2
    assert "no latest_checkpointed_iteration.txt (no save completed); pass one of them" in capsys.readouterr().err


def test_model_merger_spelling_exports_actor_and_critic(tmp_path, arith_model_dir, arithmetic_files):
    from transformers import AutoModelForTokenClassification

    from hybridrl.model_merger import main as merger_main

    out = str(tmp_path / "run")
    trainer = PPOTrainer(load_config(tiny_run_overrides(arith_model_dir, arithmetic_files, out, algo="gae", steps=1,
                                                        extra=["trainer.save_freq=1"])))
    trainer.fit()
    step = os.path.join(out, "global_step_1")
    assert merger_main(["merge", "--backend", "fsdp", "--local_dir", os.path.join(step, "actor"),
                        "--target_dir", str(tmp_path / "actor_hf")]) == 0
    assert merger_main(["merge", "--backend", "fsdp", "--local_dir", os.path.join(step, "critic"),
                        "--target_dir", str(tmp_path / "critic_hf"), "--is-value-model"]) == 0
    critic = AutoModelForTokenClassification.from_pretrained(str(tmp_path / "critic_hf"))
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        expected = local_worker(trainer).critic.model.eval()(ids).logits
        assert torch.allclose(critic(ids).logits, expected, atol=1e-5)
    # `hybridrl export` on the critic/ folder itself needs no --role: the folder names the role
    assert export_main([os.path.join(step, "critic"), str(tmp_path / "critic_export")]) == 0
    exported = AutoModelForTokenClassification.from_pretrained(str(tmp_path / "critic_export"))
    with torch.no_grad():
        assert torch.allclose(exported(ids).logits, expected, atol=1e-5)
    assert export_main([os.path.join(step, "critic"), str(tmp_path / "x"), "--role", "actor"]) == 2
