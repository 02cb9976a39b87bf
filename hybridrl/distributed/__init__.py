"""Worker groups (in-process, local processes, Ray), visible devices, FSDP2 helpers (`.fsdp`)."""

from .errors import (
    GroupClosedError,
    PlacementError,
    RayInitError,
    WorkerDiedError,
    WorkerError,
)
from .local_launcher import LocalWorkerGroup
from .placement import num_visible_devices
from .launcher_choice import choose_launcher
from .ray_launcher import RayResourcePool, RayWorkerGroup, ResourcePoolManager, init_ray
from .worker_group import InProcessGroup, WorkerGroup

__all__ = [
    "GroupClosedError", "InProcessGroup", "LocalWorkerGroup", "PlacementError", "RayInitError", "RayResourcePool",
    "RayWorkerGroup", "ResourcePoolManager", "WorkerDiedError", "WorkerError", "WorkerGroup", "choose_launcher",
    "init_ray", "num_visible_devices",
]
