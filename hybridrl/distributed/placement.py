"""How many devices this process may use. Which roles run on which of them (`*.device_ids`) is the config's
to check, before anything starts: `hybridrl.config.placement.validate_placement`."""

from __future__ import annotations

import os


def num_visible_devices(device_type: str) -> int:
    """Devices this process may use: CUDA GPUs (after CUDA_VISIBLE_DEVICES), or CPU cores for "cpu"."""
    if device_type == "cuda":
        import torch

        return torch.cuda.device_count()
    if device_type == "cpu":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    raise ValueError(f"unknown device type {device_type!r}; use 'cuda' or 'cpu'")
