"""Issue #27 items 1 and 6 in real runs: checkpoint contents that would lose the run are refused, a resume reads
back what it needs or fails by name, checkpoints are never unpickled, and earlier-format checkpoints still
resume exactly."""

from __future__ import annotations

import os

import pytest
import torch

from hybridrl.checkpoint.errors import CheckpointError
from hybridrl.checkpoint.role_files import load_role, read_model_weights
from hybridrl.checkpoint.state_io import load_state, load_tensors, save_tensors
from hybridrl.config import ConfigError, load_config
from hybridrl.trainer.ppo_trainer import PPOTrainer
from tests.checkpoint.test_state_io import _RunsCode

SAVE = ["trainer.save_freq=2"]
ACTOR = "actor_rollout_ref.actor.checkpoint"


def train(overrides: list[str]) -> PPOTrainer:
    trainer = PPOTrainer(load_config(overrides))
    trainer.fit()
    return trainer


@pytest.mark.parametrize("value,expected", [
    ("[modle,optimizer,extra]", "has unknown part 'modle'; did you mean 'model'?"),
    ("[]", "saves or loads nothing, so a resume would start from the initial weights"),
])
def test_contents_that_would_lose_the_run_are_refused_before_it_starts(tmp_path, overrides_for, value, expected):
    with pytest.raises(ConfigError, match=rf"{ACTOR}.save_contents.*{expected}".replace("[", r"\[").replace(
            "(", r"\(").replace(")", r"\)")):
        PPOTrainer(load_config(overrides_for(tmp_path, 2, SAVE + [f"{ACTOR}.save_contents={value}"])))
    assert not os.path.exists(tmp_path / "global_step_2")


def test_a_checkpoint_without_what_load_contents_asks_for_fails_the_resume_by_name(tmp_path, overrides_for):
    train(overrides_for(tmp_path, 2, SAVE + [f"{ACTOR}.save_contents=[model]"]))
    with pytest.raises(CheckpointError, match=r"global_step_2/actor was saved with save_contents=\['model'\] and lacks "
                                              r"\['optimizer', 'extra'\], which actor_rollout_ref.actor.checkpoint"
                                              r".load_contents="):
        train(overrides_for(tmp_path, 4, SAVE))
    trainer = train(overrides_for(tmp_path, 3, SAVE + [f"{ACTOR}.save_contents=[model]"]))  # what was saved: fine
    assert trainer.global_step == 3


def test_a_damaged_checkpoint_fails_the_resume_by_name(tmp_path, overrides_for):
    train(overrides_for(tmp_path, 2, SAVE))
    path = tmp_path / "global_step_2" / "actor" / "model.safetensors"
    weights = load_tensors(str(path))
    weights["model.norm.weight"].add_(1.0)  # one tensor changed after the save (a flipped bit would do)
    save_tensors(str(path), weights)
    with pytest.raises(CheckpointError, match=r"model.safetensors does not hold what its manifest lists \(1 of \d+ "
                                              r"tensors: model.norm.weight: values differ"):
        train(overrides_for(tmp_path, 3, SAVE))


def to_earlier_format(step_dir) -> None:
    """Rewrite a checkpoint as earlier hybridrl versions wrote it: torch.save pickles, no manifest."""
    role_dir = step_dir / "actor"
    state = load_role(str(role_dir), ["model", "optimizer", "extra"])
    torch.save(state["model"], role_dir / "model.pt")
    torch.save(state["optimizer"], role_dir / "optim.pt")
    torch.save(state["extra"], role_dir / "extra_state.pt")
    torch.save(load_state(str(step_dir / "data"))[0], step_dir / "data.pt")
    for name in ("model.safetensors", "optim.json", "optim.safetensors", "extra_state.json", "extra_state.safetensors",
                 "manifest.json"):
        os.remove(role_dir / name)
    os.remove(step_dir / "data.json")


def test_an_earlier_format_checkpoint_resumes_bitwise(tmp_path, overrides_for):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(overrides_for(straight, 4, SAVE))
    train(overrides_for(resumed, 2, SAVE))
    to_earlier_format(resumed / "global_step_2")
    train(overrides_for(resumed, 4, SAVE))
    want, got = (read_model_weights(str(run / "global_step_4" / "actor")) for run in (straight, resumed))
    assert all(torch.equal(got[name], want[name]) for name in want)


def test_a_crafted_data_pt_is_refused_and_never_runs(tmp_path, overrides_for):
    """The audit's case: a data.pt that ran a shell command on resume."""
    train(overrides_for(tmp_path, 2, SAVE))
    step_dir = tmp_path / "global_step_2"
    to_earlier_format(step_dir)
    marker = tmp_path / "pwned"
    torch.save(_RunsCode(str(marker)), step_dir / "data.pt")
    with pytest.raises(CheckpointError, match=r"refused to load .*global_step_2/data.pt: it holds Python objects a "
                                              r"checkpoint never contains"):
        train(overrides_for(tmp_path, 3, SAVE))
    assert not marker.exists()
