"""Which devices each role's `*.device_ids` list gives it: the layout that placement checks, fixes and plans read.

A null list is the actor's devices for the rollout, reference and critic (they share the actor's devices, as in
the default hybrid placement) and every device for the actor. The rules a layout keeps, and the messages that
say how to fix one, are `config.placement` and `config.placement_fixes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from hybridrl.config.roles import critic_enabled, ref_enabled
from hybridrl.config.schema import HybridRLConfig


@dataclass(frozen=True)
class RoleDevices:
    """One role's list as configured (`given`, None = null) and as placed (`devices`)."""

    role: str
    key: str
    given: list[int] | None
    devices: list[int]
    default: str = "every device"  # what a null list meant

    def describe(self) -> str:
        if self.given is None:
            return f"{self.key}=null (defaulted to {self.default}: {self.devices})"
        return f"{self.key}={self.given}"


def is_remote(type_name: str | None, path: str) -> bool:
    """`type=vllm_api` or an http(s) URL as the model path: a model behind an HTTP pooling endpoint, which takes
    no device."""
    return type_name == "vllm_api" or str(path).startswith(("http://", "https://"))


def remote_critic(cfg: HybridRLConfig) -> bool:
    """A frozen critic behind an HTTP endpoint (critic.type=vllm_api): it takes no device and does not train."""
    return is_remote(cfg.critic.type, cfg.critic.model.path)


def reward_model_ids(cfg: HybridRLConfig, device_type: str = "cuda") -> list[int]:
    """The GPUs an in-process reward model runs on (in the controller's process, between generation and the
    updates: it may share devices with any role), when its list is given; none on CPU, where it runs on the CPU."""
    rm = cfg.reward_model
    if rm.device_ids is None or not rm.enable or is_remote(rm.type, rm.model.path) or device_type != "cuda":
        return []
    return list(rm.device_ids)


def role_device_ids(cfg: HybridRLConfig) -> dict[str, tuple[str, list[int] | None, bool]]:
    """role -> (key, device_ids, whether the role runs on the run's devices)."""
    arr = cfg.actor_rollout_ref
    return {
        "actor": ("actor_rollout_ref.actor.device_ids", arr.actor.device_ids, True),
        "rollout": ("actor_rollout_ref.rollout.device_ids", arr.rollout.device_ids, True),
        "reference": ("actor_rollout_ref.ref.device_ids", arr.ref.device_ids, ref_enabled(cfg)),
        "critic": ("critic.device_ids", cfg.critic.device_ids, critic_enabled(cfg) and not remote_critic(cfg)),
    }


def placed_roles(cfg: HybridRLConfig, num_devices: int) -> list[RoleDevices]:
    """The roles that start ranks, each with its devices: a null list is the actor's devices (every device for
    the actor's own), so `actor.device_ids=[0,1] rollout.device_ids=[2,3]` keeps the reference with the actor."""
    actor = cfg.actor_rollout_ref.actor.device_ids
    default = list(range(num_devices)) if actor is None else list(actor)
    meaning = "every device" if actor is None else "the actor's devices"
    return [RoleDevices(role, key, ids, (list(range(num_devices)) if role == "actor" else default)
                        if ids is None else list(ids), "every device" if role == "actor" else meaning)
            for role, (key, ids, placed) in role_device_ids(cfg).items() if placed]


def device_lists(cfg: HybridRLConfig, num_devices: int) -> dict[str, tuple[int, ...]]:
    """role -> its devices, sorted, for the roles that start ranks: what config/run_plan.plan_groups groups them by."""
    return {role.role: tuple(sorted(role.devices)) for role in placed_roles(cfg, num_devices)}


def partial_overlaps(roles: list[RoleDevices]) -> list[tuple[RoleDevices, RoleDevices]]:
    """Pairs of roles sharing some devices but not all: two groups' processes would share those devices."""
    return [(a, b) for a, b in combinations(roles, 2)
            if set(a.devices) & set(b.devices) and sorted(a.devices) != sorted(b.devices)]


def idle_devices(cfg: HybridRLConfig, roles: list[RoleDevices], device_type: str, num_devices: int) -> list[int]:
    used = {d for role in roles for d in role.devices} | set(reward_model_ids(cfg, device_type))
    return sorted(set(range(num_devices)) - used)
