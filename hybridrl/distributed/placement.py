"""Which devices each role runs on: every role shares every device by default (the hybrid engine).

Explicit `<role>.device_ids` lists are checked here, before any worker starts.
"""

from __future__ import annotations

import os

from .errors import PlacementError

# Roles that may not share devices: they train at the same time and each holds optimizer state.
# actor↔rollout and actor↔ref may share (the hybrid engine switches between them).
EXCLUSIVE_PAIRS: tuple[tuple[str, str], ...] = (("actor", "critic"), ("rollout", "critic"))


def num_visible_devices(device_type: str) -> int:
    """Devices this process may use: CUDA GPUs (after CUDA_VISIBLE_DEVICES), or CPU cores for "cpu"."""
    if device_type == "cuda":
        import torch

        return torch.cuda.device_count()
    if device_type == "cpu":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    raise ValueError(f"unknown device type {device_type!r}; use 'cuda' or 'cpu'")


def _check_ids(role: str, ids: list[int], num_devices: int) -> None:
    if not ids:
        raise PlacementError(f"{role}.device_ids is empty; give at least one device, or null to share all "
                             f"{num_devices}")
    bad = [d for d in ids if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d < num_devices]
    if bad:
        raise PlacementError(f"{role}.device_ids {ids}: {bad} out of range; {num_devices} device(s) are visible, "
                             f"so ids must be in 0..{num_devices - 1}")
    duplicates = sorted({d for d in ids if ids.count(d) > 1})
    if duplicates:
        raise PlacementError(f"{role}.device_ids {ids} lists device(s) {duplicates} more than once; one rank per "
                             f"device, e.g. {sorted(set(ids))}")


def resolve_placement(role_device_ids: dict[str, list[int] | None], num_devices: int) -> dict[str, list[int]]:
    """Each role's device list: None → all devices; explicit lists validated.

    Raises PlacementError for ids out of range, duplicates, and devices shared by an exclusive pair
    (actor/critic, rollout/critic) unless both roles use exactly the same devices (colocated).
    """
    if num_devices < 1:
        raise PlacementError(f"no devices to place roles {sorted(role_device_ids)} on (num_devices={num_devices})")
    placement: dict[str, list[int]] = {}
    for role, ids in role_device_ids.items():
        if ids is None:
            placement[role] = list(range(num_devices))
        else:
            _check_ids(role, list(ids), num_devices)
            placement[role] = list(ids)
    for first, second in EXCLUSIVE_PAIRS:
        if first in placement and second in placement:
            _check_exclusive(first, second, placement, role_device_ids, num_devices)
    return placement


def _check_exclusive(first: str, second: str, placement: dict[str, list[int]],
                     explicit: dict[str, list[int] | None], num_devices: int) -> None:
    a, b = placement[first], placement[second]
    if sorted(a) == sorted(b):
        return  # fully colocated, like the default: the roles take turns on the same devices
    shared = sorted(set(a) & set(b))
    if not shared:
        return
    free = sorted(set(range(num_devices)) - set(a))
    fix = (f"give {second} devices of its own, e.g. {second}.device_ids={free[:len(b)] or '[...]'}, "
           f"or leave both device_ids null to share every device")
    implied = [r for r in (first, second) if explicit.get(r) is None]
    note = f" ({' and '.join(implied)} defaulted to every device)" if implied else ""
    raise PlacementError(f"{first}.device_ids {a} and {second}.device_ids {b} share device(s) {shared}{note}; "
                         f"{first} and {second} must use either the same devices or disjoint ones: {fix}")
