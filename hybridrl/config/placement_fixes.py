"""The fix an overlap error suggests: device lists that, set as said, pass the placement rules.

Each candidate changes one list: one of the two roles takes its devices the other does not use, or the other's
devices; a role whose null list follows the actor's is moved through the actor's list. A candidate is offered
when the layout it gives has no partial overlap and no idle device left (else, failing any such, when it at
least settles this pair without adding a conflict), so applying a suggestion never trades one error for another.
"""

from __future__ import annotations

import copy

from hybridrl.config.role_devices import RoleDevices, idle_devices, partial_overlaps, placed_roles
from hybridrl.config.schema import HybridRLConfig

ACTOR_KEY = "actor_rollout_ref.actor.device_ids"
MAX_SUGGESTIONS = 2


def overlap_fix(cfg: HybridRLConfig, first: RoleDevices, second: RoleDevices, device_type: str,
                num_devices: int) -> str:
    before = _conflicts(cfg, device_type, num_devices)
    complete, partial = [], []
    for key, ids in _candidates(first, second):
        after_cfg = _with_list(cfg, key, ids)
        after = _conflicts(after_cfg, device_type, num_devices)
        suggestion = f"{key}={ids}"
        if after == 0:
            complete.append(suggestion)
        elif after < before and not _still_overlap(after_cfg, first.role, second.role, num_devices):
            partial.append(suggestion)
    offered = list(dict.fromkeys(complete or partial))[:MAX_SUGGESTIONS]
    if not offered:
        return (f"give the roles identical or disjoint lists that together name every device 0..{num_devices - 1} "
                "(or fewer devices per node)")
    return "set " + " or ".join(offered) + ("" if complete else " (then fix the other conflicts listed)")


def _candidates(first: RoleDevices, second: RoleDevices) -> list[tuple[str, list[int]]]:
    out = []
    for role, other in ((first, second), (second, first)):
        own = sorted(set(role.devices) - set(other.devices))
        for ids in ([own] if own else []) + [sorted(other.devices)]:
            out.append((role.key, ids))
            if role.given is None and role.role != "actor":  # its list is the actor's: move the actor
                out.append((ACTOR_KEY, ids))
    return out


def _conflicts(cfg: HybridRLConfig, device_type: str, num_devices: int) -> int:
    roles = placed_roles(cfg, num_devices)
    return len(partial_overlaps(roles)) + len(idle_devices(cfg, roles, device_type, num_devices))


def _still_overlap(cfg: HybridRLConfig, role_a: str, role_b: str, num_devices: int) -> bool:
    return any({a.role, b.role} == {role_a, role_b} for a, b in partial_overlaps(placed_roles(cfg, num_devices)))


def _with_list(cfg: HybridRLConfig, key: str, ids: list[int]) -> HybridRLConfig:
    """A copy of `cfg` with the device list at `key` (e.g. critic.device_ids) set to `ids`."""
    changed = copy.deepcopy(cfg)
    *path, leaf = key.split(".")
    node = changed
    for part in path:
        node = getattr(node, part)
    setattr(node, leaf, list(ids))
    return changed
