"""The controller's side of handing the actor's updated weights to rollout ranks in other processes.

When the rollout has devices of its own (per-role `*.device_ids`) or borrows some (elastic rollout), the
actor's full weights must reach other processes after every update. `WeightHandoff` gathers them once
per step from the actor's group (its rank 0 casts each tensor to the dtype the rollout holds as the ranks
gather it; in a one-process run that rank is the controller itself) and hands every rollout group the
same payload:

- `shared_memory` (the local launcher: every rank is on this node): the writer fills ONE flat buffer in
  /dev/shm, reused every step, and only a small `WeightManifest` travels through the launcher's pipes;
  rollout ranks map the buffer read-only and copy from it (`distributed.weight_handoff`). If /dev/shm is
  too small the tensors go pickled instead, with a warning naming the size needed.
- `pickle` (Ray, whose ranks may sit on other nodes, which shared memory does not span): the tensors
  travel pickled through the controller (Ray's object store).

The controller's calls are sequential (gather, then every load), so a buffer is never rewritten while a
rollout rank reads it. The buffer is removed by `close()` (trainer shutdown, also after a worker died)
and at interpreter exit; see `distributed.weight_handoff` for the other ways it cannot leak.
"""

from __future__ import annotations

import atexit

import torch

from hybridrl.logging.log import get_logger

from .weight_handoff import (
    BufferSpec,
    Payload,
    PickledWeights,
    default_buffer_dir,
    new_buffer_path,
    remove_buffer,
    sweep_stale_buffers,
)
from .worker_group import WorkerGroup

log = get_logger("hybridrl.trainer")
HANDOFF_MODES = ("shared_memory", "pickle")
# Chosen by launcher, explicitly: the in-process and local launchers' ranks all run on this node (shared memory
# reaches them, and the replicas an elastic rollout borrows); Ray's may run on other nodes, so weights keep
# travelling pickled through Ray's object store.
HANDOFF_BY_LAUNCHER = {"in_process": "shared_memory", "local": "shared_memory", "ray": "pickle"}


class WeightHandoff:
    """Gathers the actor's weights once per step into a payload every rollout group can load.

    `dtype`: what the rollout holds (None: keep the actor's). `max_bytes`: a cap on the shared-memory
    buffer (None: the free space of /dev/shm less a reserve). `directory`: where the buffer lives.
    """

    def __init__(self, mode: str, dtype: torch.dtype | None, *, max_bytes: int | None = None,
                 directory: str | None = None):
        if mode not in HANDOFF_MODES:
            raise ValueError(f"weight handoff mode {mode!r} is not one of {HANDOFF_MODES}")
        self.mode, self.dtype, self.max_bytes = mode, dtype, max_bytes
        self.path: str | None = None
        self.expected_bytes = 0  # what the last handoff needed: a buffer known too small is not tried again
        self.spilling = False
        self.last_bytes, self.last_shared = 0, False
        if mode == "shared_memory":
            self._choose_buffer(directory or default_buffer_dir())

    def _choose_buffer(self, directory: str | None) -> None:
        if directory is None:
            log.warning("no writable /dev/shm on this node: the actor's weights reach the rollout pickled through "
                        "the launcher's pipes (slower); mount a tmpfs at /dev/shm to hand them over in shared memory")
            return
        for path in sweep_stale_buffers(directory):
            log.info(f"removed weight buffer {path} left behind by a run that no longer exists")
        self.path = new_buffer_path(directory)  # created by the first write
        atexit.register(self.close)

    def gather(self, actor: WorkerGroup) -> Payload:
        """The actor's full weights, gathered by every rank of its group (a collective), as a payload for `load`."""
        payload = self._gather_shared(actor) if self.path is not None else \
            PickledWeights(actor.call_all("actor_weights", self.dtype)[0])
        self.last_bytes, self.last_shared = payload.nbytes, payload.shared
        return payload

    def _gather_shared(self, actor: WorkerGroup) -> Payload:
        """Rank 0 writes the buffer, or spills the tensors when it cannot hold them."""
        assert self.path is not None, "a shared-memory gather needs the buffer's path"
        spec = BufferSpec(self.path, self.dtype, self.max_bytes, self.expected_bytes)
        result = actor.call_all("write_actor_weights", spec)[0]
        if not result.shared:  # spilled
            if not self.spilling:
                log.warning(f"shared-memory weight handoff not possible: {result.reason}; sending the weights "
                            f"pickled through the launcher's pipes instead (slower). Fix: make /dev/shm larger "
                            f"than {result.needed_bytes / 2**30:.2f} GiB plus what else uses it (docker: "
                            f"--shm-size; Kubernetes: an emptyDir with medium Memory at /dev/shm)")
            self.spilling, self.expected_bytes = True, result.needed_bytes
            return result
        if self.spilling:
            log.info("shared-memory weight handoff works again (enough free space in /dev/shm)")
        self.spilling, self.expected_bytes = False, result.nbytes
        return result

    def load(self, group: WorkerGroup, payload: Payload) -> None:
        """Every rank of a rollout group loads the payload into its engine (`load_rollout_weights`)."""
        group.call_all("load_rollout_weights", payload)

    def metrics(self) -> dict[str, float]:
        """The last handoff: GB written (once, read by every rollout rank) and whether shared memory carried it."""
        return {"perf/update_weights_gb": self.last_bytes / 1e9,
                "perf/update_weights_shared_memory": float(self.last_shared)}

    def close(self) -> None:
        """Remove the buffer (safe to call twice, and after the writer died)."""
        if self.path is not None:
            remove_buffer(self.path)
            atexit.unregister(self.close)
