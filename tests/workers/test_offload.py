"""CPU offload of parameters and optimizer state: identity kept, values kept, training unchanged."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch

from hybridrl.models.tiny import build_tiny_model
from hybridrl.workers import offload
from hybridrl.workers.offload import PhaseOffloader, load_module, load_optimizer, offload_module, offload_optimizer
from tests.workers.helpers import build_critic, ragged_batch
from tests.workers.rank_actor import OFFLOAD_FLAGS


def tiny(device: str = "cpu") -> torch.nn.Module:
    return build_tiny_model("qwen2", seed=3, num_layers=1, hidden_size=32, intermediate_size=64).to(device)


def batch(step: int, device: str) -> torch.Tensor:
    return torch.randint(0, 128, (4, 12), generator=torch.Generator().manual_seed(step)).to(device)


def train(model, optim, device: str, steps: int = 3, offloader: PhaseOffloader | None = None) -> None:
    """Log-prob forward (no grad) then an AdamW step, per step, like old_log_prob + update_actor."""
    for step in range(steps):
        ids = batch(step, device)
        with offloader.for_compute() if offloader else torch.enable_grad():
            with torch.no_grad():
                model(input_ids=ids).logits.sum()
        with offloader.for_update() if offloader else torch.enable_grad():
            optim.zero_grad(set_to_none=False)  # grads stay allocated: they must travel too
            model(input_ids=ids, labels=ids).loss.backward()
            if offloader:
                offloader.before_step()
            optim.step()


def fake_transfer(monkeypatch) -> list[str]:
    """CPU boxes have one real device: replace the copy with a clone so every move is visible."""
    targets: list[str] = []

    def clone_to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
        targets.append(device.type)
        return tensor.clone()

    monkeypatch.setattr(offload, "_to", clone_to)
    return targets


def test_moving_keeps_parameter_objects_and_moves_everything(monkeypatch):
    model = tiny()
    model(input_ids=batch(0, "cpu"), labels=batch(0, "cpu")).loss.backward()
    params = list(model.parameters())
    old = {"data": [p.data_ptr() for p in params], "grad": [p.grad.data_ptr() for p in params],
           "buffer": [b.data_ptr() for b in model.buffers()]}
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # tied: moves once
    targets = fake_transfer(monkeypatch)
    offload_module(model)
    assert targets == ["cpu"] * (2 * len(params) + len(old["buffer"])) and old["buffer"]
    assert [id(p) for p in model.parameters()] == [id(p) for p in params]
    assert all(a != p.data_ptr() for a, p in zip(old["data"], params))
    assert all(a != p.grad.data_ptr() for a, p in zip(old["grad"], params))
    assert all(a != b.data_ptr() for a, b in zip(old["buffer"], model.buffers()))
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_optimizer_state_moves_but_step_counter_stays(monkeypatch):
    model = tiny()
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train(model, optim, "cpu", steps=1)
    old = {id(s["exp_avg"]) for s in optim.state.values()}
    steps = [s["step"] for s in optim.state.values()]
    targets = fake_transfer(monkeypatch)
    load_optimizer(optim, "cuda")
    assert targets == ["cuda"] * (2 * len(optim.state))  # exp_avg and exp_avg_sq of every parameter
    assert not old & {id(s["exp_avg"]) for s in optim.state.values()}
    assert all(a is s["step"] for a, s in zip(steps, optim.state.values()))  # AdamW's 0-dim step stays on the host


def test_cpu_round_trip_is_a_no_op_that_keeps_values():
    model = tiny()
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train(model, optim, "cpu", steps=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    moments = [s["exp_avg"].clone() for s in optim.state.values()]
    offload_module(model), offload_optimizer(optim)
    load_module(model, "cpu"), load_optimizer(optim, "cpu")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(torch.equal(m, s["exp_avg"]) for m, s in zip(moments, optim.state.values()))


@pytest.mark.parametrize("flags", [(True, True), (True, False), (False, True), (False, False)])
def test_training_with_offloader_is_bit_identical(flags):
    plain, offloaded = tiny(), tiny()
    plain_optim = torch.optim.AdamW(plain.parameters(), lr=1e-2)
    optim = torch.optim.AdamW(offloaded.parameters(), lr=1e-2)
    train(plain, plain_optim, "cpu")
    train(offloaded, optim, "cpu", offloader=PhaseOffloader(offloaded, optim, "cpu", *flags))
    for (name, a), b in zip(plain.named_parameters(), offloaded.parameters()):
        assert torch.equal(a, b), name


def test_nested_phases_move_once():
    model = tiny()
    offloader = PhaseOffloader(model, None, "cpu", param_offload=True, optimizer_offload=True)
    assert not offloader.optimizer_offload  # no optimizer (e.g. the reference model): nothing to move
    with offloader.for_compute():
        with offloader.for_update():
            assert offloader._params.users == 2
    assert offloader._params.users == 0


def test_optimizer_state_comes_in_only_for_the_step(monkeypatch):
    """Forward and backward of an update run with the optimizer state still on the host."""
    model = tiny()
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train(model, optim, "cpu", steps=1)  # creates the state
    offloader = PhaseOffloader(model, optim, "cpu", param_offload=False, optimizer_offload=True)
    targets = fake_transfer(monkeypatch)
    seen = []
    model.register_forward_hook(lambda *args: seen.append(("forward", offloader._optimizer.users, len(targets))))
    with offloader.for_update():
        model(input_ids=batch(1, "cpu"), labels=batch(1, "cpu")).loss.backward()
        offloader.before_step()
        seen.append(("step", offloader._optimizer.users, len(targets)))
        offloader.before_step()  # a second optimizer step in the same update moves nothing
        optim.step()
    moves = 2 * len(optim.state)
    assert seen == [("forward", 0, 0), ("step", 1, moves)] and len(targets) == 2 * moves  # in once, out once
    with pytest.raises(RuntimeError, match="inside `with offloader.for_update"):
        offloader.before_step()


def test_critic_trains_the_same_with_its_offloads_on(monkeypatch, tiny_model_dir):
    """critic.model.fsdp_config.param_offload / optimizer_offload, one process: values, updates and the
    checkpoint state equal a plain critic's, and both moves happen."""
    batch = ragged_batch(num_rows=8, seed=5)
    plain = build_critic(tiny_model_dir)
    offloaded = build_critic(tiny_model_dir, [flag for flag in OFFLOAD_FLAGS if flag.startswith("critic.")])
    targets = fake_transfer(monkeypatch)
    for critic in (plain, offloaded):
        critic.update_critic(batch)
        critic.update_critic(batch)
    assert "cpu" in targets and len(targets) > 2 * len(list(plain.model.parameters()))  # params and moments
    torch.testing.assert_close(offloaded.compute_values(batch)["values"], plain.compute_values(batch)["values"],
                               rtol=0, atol=0)
    assert_same_state(offloaded.state_dict(), plain.state_dict())


@pytest.mark.slow
def test_two_fsdp_ranks_train_the_same_with_every_offload_on(tiny_model_dir):
    """Parameters and optimizer state of FSDP2-sharded actor and critic offloaded between phases (2 gloo
    ranks): each move copies the rank's shards, and log-probs, values and the checkpoint after two updates
    equal the plain roles' on the same ranks, so FSDP gathers from the moved shards; a checkpoint loads
    into the offloaded roles, and one taken before the first optimizer step changes nothing."""
    ranks = train_offload_ranks(tiny_model_dir, "cpu", world_size=2)
    assert all(rank["moves"] > 0 for rank in ranks)
    assert_offload_matches_plain(ranks, tolerance=0)


def train_offload_ranks(model_dir: str, device: str, world_size: int, **options) -> list[dict]:
    """`OffloadRank.train` on each rank of a group; `options`: its `variants` and `common` flags."""
    from hybridrl.distributed.local_launcher import LocalWorkerGroup
    from tests.workers.rank_actor import OffloadRank

    devices = list(range(world_size)) if device == "cuda" else None
    with LocalWorkerGroup(OffloadRank, {"model_dir": model_dir, "device": device, **options}, world_size=world_size,
                          role="offload", device_ids=devices) as group:
        return group.call_all("train", ragged_batch(num_rows=8, seed=5))


def assert_offload_matches_plain(ranks: list[dict], tolerance: float, variants: tuple[str, ...] = ("offload",)
                                 ) -> None:
    """Offloaded roles train like plain ones (scores, the last update's losses and gradient norms, the weights a
    rollout sync gets, the checkpoint); loading a checkpoint into them (their weights from before training)
    gives back the scores from before training."""
    close = functools.partial(torch.testing.assert_close, rtol=tolerance, atol=tolerance)
    for rank, variant in itertools.product(ranks, variants):
        got, want = rank[variant], rank["plain"]
        for key in ("log_probs", "values"):
            close(got[key], want[key], msg=key)
            close(got["reloaded"][key], rank["initial"][key], msg=key)
            assert not torch.allclose(got[key], rank["initial"][key]), key  # training changed them
        for key in ("actor/pg_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm"):
            close(torch.tensor(got["metrics"][key]), torch.tensor(want["metrics"][key]), msg=key)
        assert got["synced"].keys() == want["synced"].keys()
        for name, tensor in want["synced"].items():
            close(got["synced"][name], tensor, msg=name)
    for role, variant in itertools.product(("actor_state", "critic_state"), variants):
        assert_same_state(ranks[0][variant][role], ranks[0]["plain"][role], tolerance)  # rank 0: the full state
        assert all(rank[variant][role]["model"] == {} for rank in ranks[1:])


def assert_same_state(got: dict, want: dict, tolerance: float = 0) -> None:
    assert want["model"] and got["model"].keys() == want["model"].keys()
    for name, tensor in want["model"].items():
        torch.testing.assert_close(got["model"][name].cpu(), tensor.cpu(), rtol=tolerance, atol=tolerance, msg=name)
    assert want["optimizer"]["state"]
    for index, slots in want["optimizer"]["state"].items():
        for slot, value in slots.items():
            torch.testing.assert_close(got["optimizer"]["state"][index][slot].cpu(), value.cpu(), rtol=tolerance,
                                       atol=tolerance)


# --------------------------------------------------------------------------------------------- GPU
def allocated() -> int:
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


@pytest.mark.gpu
def test_gpu_offload_frees_memory_and_round_trips():
    model = tiny("cuda")
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train(model, optim, "cuda", steps=1)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    state = {k: v.clone() for k, v in model.state_dict().items()}
    before = allocated()
    offload_module(model)
    assert before - allocated() >= 2 * param_bytes  # weights + grads left the device
    assert all(p.device.type == "cpu" and p.is_pinned() for p in model.parameters())
    load_module(model, "cuda")
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    moments = allocated()
    offload_optimizer(optim)
    assert moments - allocated() >= 2 * param_bytes  # exp_avg + exp_avg_sq
    load_optimizer(optim, "cuda")
    assert all(s["exp_avg"].is_cuda for s in optim.state.values())


@pytest.mark.gpu
def test_gpu_training_with_offloader_matches_and_stays_off_device_while_idle():
    plain, offloaded = tiny("cuda"), tiny("cuda")
    plain_optim = torch.optim.AdamW(plain.parameters(), lr=1e-2)
    optim = torch.optim.AdamW(offloaded.parameters(), lr=1e-2)
    train(plain, plain_optim, "cuda")
    del plain_optim
    baseline = allocated()
    offloader = PhaseOffloader(offloaded, optim, "cuda", param_offload=True, optimizer_offload=True)
    train(offloaded, optim, "cuda", offloader=offloader)
    assert allocated() <= baseline - sum(p.numel() * p.element_size() for p in plain.parameters())
    with offloader.for_compute():
        for (name, a), b in zip(plain.named_parameters(), offloaded.parameters()):
            assert torch.equal(a, b), name


@pytest.mark.gpu
def test_gpu_fsdp_ranks_keep_roles_off_the_device_and_train_the_same(tiny_model_dir):
    """FSDP2 ranks on CUDA (NCCL; one rank where one GPU is visible: DTensor parameters all the same): with
    every offload on, a built actor and critic leave almost nothing on the device, and training through real
    device <-> pinned-host moves matches the plain roles."""
    world_size = min(torch.cuda.device_count(), 2)
    ranks = train_offload_ranks(tiny_model_dir, "cuda", world_size)
    for rank in ranks:
        plain, offloaded = rank["device_bytes"]["plain"], rank["device_bytes"]["offload"]
        assert plain > 0 and offloaded < plain / 10, rank["device_bytes"]
    assert_offload_matches_plain(ranks, tolerance=1e-5)
