"""Role workers on one gloo rank for the multi-rank worker tests (importable, so spawned ranks can unpickle it)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from hybridrl.utils.batch import Batch
from tests.workers.helpers import build_actor, build_critic


class ActorRank:
    def __init__(self, model_dir: str, extra: list[str]) -> None:
        torch.set_num_threads(1)
        self.actor = build_actor(model_dir, extra, world_size=dist.get_world_size())

    def compute_log_prob(self, batch: Batch) -> Batch:
        """The log-probs, and how many micro-batches this rank ran (the same on every rank, or FSDP hangs)."""
        out = self.actor.compute_log_prob(batch)
        agreed = self.actor.log_prob_plan.split(batch, self.actor.parallel.max_over_ranks)
        out["num_parts"] = torch.full((len(batch),), len(agreed.parts))
        out["local_min_parts"] = torch.full((len(batch),), len(self.actor.log_prob_plan.split(batch).parts))
        return out

    def update_actor(self, batch: Batch) -> dict[str, float]:
        return self.actor.update_actor(batch)

    def full_grads(self) -> list[torch.Tensor]:
        return [p.grad.full_tensor() for p in self.actor.model.parameters() if p.grad is not None]


OFFLOAD_FLAGS = ["actor_rollout_ref.actor.fsdp_config.param_offload=true",
                 "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
                 "critic.model.fsdp_config.param_offload=true", "critic.model.fsdp_config.optimizer_offload=true"]


class OffloadRank:
    """Actor and critic pairs with offload flags (`variants`: name -> flags; default every between-phase offload)
    beside a plain pair, on one rank; `common` flags go to every pair. CPU ranks have one device, so there each
    between-phase move is made visible as a copy (`offload._to` clones): training then only matches the plain pair
    if FSDP gathers from the moved shards and the optimizer updates them. On CUDA the moves are real;
    `device_bytes` is what each pair left allocated on the device when built."""

    def __init__(self, model_dir: str, device: str = "cpu", variants: dict[str, list[str]] | None = None,
                 common: list[str] = ()) -> None:
        torch.set_num_threads(1)
        self.moves: list[str] = []
        if device == "cpu":
            self._copy_on_every_move()
        world = dist.get_world_size()
        self.pairs, self.device_bytes = {}, {}
        for name, flags in (("plain", []), *(variants or {"offload": OFFLOAD_FLAGS}).items()):
            before = _allocated(device)
            self.pairs[name] = (build_actor(model_dir, [*common, *flags], world, device),
                                build_critic(model_dir, [*common, *flags], world, device))
            self.device_bytes[name] = _allocated(device) - before

    def _copy_on_every_move(self) -> None:
        from hybridrl.workers import offload

        move = offload._to

        def copying_to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
            self.moves.append(device.type)
            return tensor.clone() if tensor.device == device else move(tensor, device)

        offload._to = copying_to

    def train(self, batch: Batch) -> dict:
        """Per pair: its layout, two updates of each role (the last update's metrics), then log-probs, values, the
        weights a rollout sync receives and (rank 0) the checkpoint state; then each offloaded pair loads back its
        weights from before training (as a resume does, every rank passing the full state) and scores again:
        `reloaded` must equal `initial`."""
        out: dict = {"device_bytes": self.device_bytes}
        variants = [name for name in self.pairs if name != "plain"]
        # before any optimizer step: saving must not create optimizer state (torch's full state dict would)
        initial = {name: [_to_cpu(worker.state_dict()["model"]) for worker in self.pairs[name]] for name in variants}
        out["initial"] = self._scores(batch, *self.pairs[variants[0]])
        for name, (actor, critic) in self.pairs.items():
            out[name] = {"layout": _layout(actor)}
            for _ in range(2):
                metrics = {**actor.update_actor(batch), **critic.update_critic(batch)}
            out[name].update(self._scores(batch, actor, critic), metrics=metrics, synced=_synced(actor),
                             actor_state=_to_cpu(actor.state_dict()), critic_state=_to_cpu(critic.state_dict()))
        for name in variants:
            dist.broadcast_object_list(initial[name], src=0)
            for worker, state in zip(self.pairs[name], initial[name]):
                worker.load_checkpoint_state({"model": state})
            out[name]["reloaded"] = self._scores(batch, *self.pairs[name])
        out["moves"] = len(self.moves)
        return out

    @staticmethod
    def _scores(batch: Batch, actor, critic) -> dict:
        return {"log_probs": actor.compute_log_prob(batch)["old_log_probs"],
                "values": critic.compute_values(batch)["values"]}


def _layout(actor) -> dict:
    """The actor's strategy, where its parameters' local shards live and whether its optimizer is fused."""
    local = [p.to_local() if hasattr(p, "to_local") else p for p in actor.model.parameters()]
    return {"strategy": actor.parallel.name, "offloads_to_cpu": actor.parallel.offloads_to_cpu,
            "param_devices": sorted({t.device.type for t in local}),
            "pinned": all(t.is_pinned() for t in local if t.numel()), "fused": actor.optimizer.defaults.get("fused")}


def _synced(actor) -> dict[str, torch.Tensor]:
    """What a rollout sync receives (gathered one unit at a time on FSDP2), each tensor copied as it arrives."""
    return {name: tensor.detach().cpu().clone() for name, tensor in actor.named_weights()}


def _allocated(device: str) -> int:
    if device == "cpu":
        return 0
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def _to_cpu(state):
    """A copy on the CPU: a state dict may hold views of live parameters (one process, shard groups of one)."""
    if isinstance(state, dict):
        return {key: _to_cpu(value) for key, value in state.items()}
    return state.detach().cpu().clone() if isinstance(state, torch.Tensor) else state


LORA_FLAGS = ["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8",
              "actor_rollout_ref.actor.optim.lr=1e-2"]


class LoraRank:
    """A LoRA actor (FSDP2 on every rank) and its reference (the base, adapter off), on one rank."""

    def __init__(self, model_dir: str, device: str = "cpu") -> None:
        from hybridrl.workers.reference import build_reference

        torch.set_num_threads(1)
        self.actor = build_actor(model_dir, LORA_FLAGS, dist.get_world_size(), device)
        self.reference = build_reference(self.actor.cfg, self.actor, 2, torch.device(device))

    def train(self, batch: Batch) -> dict:
        """The first sync (every weight), two updates, the next sync (merged targeted layers only), the
        gathered state (rank 0) and log-probs of the actor and the reference before and after."""
        out = {"initial": self.actor.compute_log_prob(batch)["old_log_probs"], "first_sync": self._sync()}
        for _ in range(2):
            self.actor.update_actor(batch)
        out["next_sync"] = self._sync()
        out["state"] = _to_cpu(self.actor.state_dict()["model"])
        out["trained"] = self.actor.compute_log_prob(batch)["old_log_probs"]
        out["reference"] = self.reference.compute_ref_log_prob(batch)["ref_log_prob"]
        return out

    def _sync(self) -> dict[str, torch.Tensor]:
        """What a rollout sync receives, each tensor copied as it arrives: a non-targeted weight is a view
        of its unit's gathered parameters, freed when the next unit is gathered (as the engine consumes it)."""
        return {name: tensor.detach().cpu().clone() for name, tensor in self.actor.named_weights()}


class ParallelProbe:
    """Which strategy `parallelize` picks on this rank for a role's fsdp_size, and what it reports."""

    def strategies(self, model_dir: str) -> dict[int, dict]:
        torch.set_num_threads(1)
        out = {}
        for fsdp_size in (-1, 1, 2):
            actor = build_actor(model_dir, [f"actor_rollout_ref.actor.fsdp_config.fsdp_size={fsdp_size}"],
                                dist.get_world_size())
            out[fsdp_size] = {"name": actor.parallel.name, "single_device": actor.parallel.single_device,
                              "plain": all(type(p) is torch.nn.Parameter for p in actor.model.parameters()),
                              "agreed": actor.parallel.max_over_ranks(dist.get_rank() + 3)}
        return out


class ActorCriticRank:
    """An actor and a critic on one gloo rank (e.g. with Ulysses sequence parallelism in `extra`)."""

    def __init__(self, model_dir: str, extra: list[str]) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(0)  # LoRA's adapter initialisation, as `_one_process` in the tests
        world = dist.get_world_size()
        self.actor, self.critic = build_actor(model_dir, extra, world_size=world), build_critic(model_dir, extra, world)

    def compute_log_prob(self, batch: Batch) -> Batch:
        return self.actor.compute_log_prob(batch)

    def compute_values(self, batch: Batch) -> Batch:
        return self.critic.compute_values(batch)

    def update_actor(self, batch: Batch) -> dict[str, float]:
        return self.actor.update_actor(batch)

    def update_critic(self, batch: Batch) -> dict[str, float]:
        return self.critic.update_critic(batch)

    def full_grads(self) -> dict[str, list[torch.Tensor]]:
        return {role: [p.grad.full_tensor() for p in worker.model.parameters() if p.grad is not None]
                for role, worker in (("actor", self.actor), ("critic", self.critic))}
