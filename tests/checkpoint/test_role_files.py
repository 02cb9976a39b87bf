"""checkpoint/role_files.py: a role's save, load and restore; parts that are missing or did not take fail by name."""

from __future__ import annotations

import os

import pytest
import torch

from hybridrl.checkpoint.errors import CheckpointError
from hybridrl.checkpoint.role_files import load_role, restore_role, rng_state, save_role

ALL = ["model", "optimizer", "extra"]


class LinearWorker:
    """The worker side of the checkpoint protocol (`state_dict`, `load_checkpoint_state`) over a real model,
    optimizer and LR schedule, as TrainState implements it in one process."""

    def __init__(self, seed: int):
        torch.manual_seed(seed)
        self.model = torch.nn.Linear(4, 3)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: 1.0 / (1 + step))

    def train_step(self) -> None:
        self.model(torch.randn(8, 4)).pow(2).mean().backward()
        self.optimizer.step()
        self.lr_scheduler.step()
        self.optimizer.zero_grad()

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "lr_scheduler": self.lr_scheduler.state_dict()}

    def load_checkpoint_state(self, state: dict) -> None:
        if "model" in state:
            self.model.load_state_dict(state["model"])
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        if "extra" in state:
            self.lr_scheduler.load_state_dict(state["extra"]["lr_scheduler"])


class ForgetfulWorker(LinearWorker):
    """A worker whose load skips the weights (the audit's defect: a restore that silently did not take)."""

    def load_checkpoint_state(self, state: dict) -> None:
        super().load_checkpoint_state({k: v for k, v in state.items() if k != "model"})


def trained_role(tmp_path, contents=ALL) -> tuple[LinearWorker, str]:
    worker = LinearWorker(seed=0)
    for _ in range(3):
        worker.train_step()
    role_dir = str(tmp_path / "global_step_3" / "actor")
    save_role(role_dir, worker.state_dict(), contents)
    return worker, role_dir


def test_restore_equals_the_saved_worker_bitwise_and_continues_identically(tmp_path):
    trained, role_dir = trained_role(tmp_path)
    rng = rng_state()
    fresh = LinearWorker(seed=1)
    restore_role(fresh, role_dir, ALL)
    for name, tensor in trained.model.state_dict().items():
        assert torch.equal(fresh.model.state_dict()[name], tensor)
    assert fresh.lr_scheduler.state_dict() == trained.lr_scheduler.state_dict()
    assert torch.equal(torch.get_rng_state(), rng["cpu"])  # the RNG as at the save (extra)
    torch.manual_seed(5)
    trained.train_step()
    torch.manual_seed(5)
    fresh.train_step()
    assert all(torch.equal(a, b) for a, b in zip(trained.model.parameters(), fresh.model.parameters()))


def test_a_restore_that_does_not_take_fails_by_name(tmp_path):
    _, role_dir = trained_role(tmp_path)
    with pytest.raises(CheckpointError, match=r"after resuming from .*global_step_3/actor the model does not hold the "
                                              r"saved weights \(2 of 2 tensors"):
        restore_role(ForgetfulWorker(seed=1), role_dir, ALL)


def test_a_part_the_checkpoint_lacks_fails_the_resume_by_name(tmp_path):
    _, role_dir = trained_role(tmp_path, contents=["model"])
    with pytest.raises(CheckpointError) as caught:
        load_role(role_dir, ALL)
    assert (f"{role_dir} was saved with save_contents=['model'] and lacks ['optimizer', 'extra'], which "
            f"actor_rollout_ref.actor.checkpoint.load_contents=['model', 'optimizer', 'extra'] asks for") \
        in str(caught.value)
    assert set(load_role(role_dir, ["model"])) == {"model"}
    with pytest.raises(CheckpointError, match=r"critic does not exist: .* holds no critic state"):
        load_role(str(tmp_path / "global_step_3" / "critic"), ALL)


def test_a_damaged_weight_file_fails_by_name(tmp_path):
    _, role_dir = trained_role(tmp_path)
    from safetensors.torch import load_file, save_file

    path = os.path.join(role_dir, "model.safetensors")
    weights = load_file(path)
    weights["weight"][0, 0] += 1.0
    save_file(weights, path)
    with pytest.raises(CheckpointError, match=r"model.safetensors does not hold what its manifest lists \(1 of 2 "
                                              r"tensors: weight: values differ"):
        load_role(role_dir, ALL)


def test_an_earlier_format_checkpoint_still_resumes(tmp_path):
    """Format 1 (torch.save pickles, no manifest), read with the weights-only unpickler."""
    trained = LinearWorker(seed=0)
    trained.train_step()
    role_dir = tmp_path / "actor"
    role_dir.mkdir()
    state = trained.state_dict()
    torch.save(state["model"], role_dir / "model.pt")
    torch.save(state["optimizer"], role_dir / "optim.pt")
    torch.save({"lr_scheduler": state["lr_scheduler"], "rng": rng_state()}, role_dir / "extra_state.pt")
    fresh = LinearWorker(seed=1)
    restore_role(fresh, str(role_dir), ALL)
    assert torch.equal(fresh.model.weight, trained.model.weight)
    assert fresh.optimizer.state_dict()["state"][0]["exp_avg"].equal(trained.optimizer.state_dict()["state"][0]["exp_avg"])


def test_unknown_parts_are_refused_at_save(tmp_path):
    with pytest.raises(CheckpointError, match=r"unknown checkpoint part\(s\) \['modle'\]"):
        save_role(str(tmp_path / "actor"), LinearWorker(0).state_dict(), ["modle"])
