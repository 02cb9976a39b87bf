"""One rank of a worker group hosting some or all roles (actor, rollout replica, reference, critic).

With every role (the default hybrid placement) it is verl's colocated `ActorRolloutRefWorker` (+ critic)
in one process: the roles take turns on the rank's device. The actor, reference and critic are
FSDP2-sharded over the group (each role class shards itself when torch.distributed is up); the rollout
generates the rank's shard of the prompts with a plain (unsharded) copy of the policy, refreshed from
the actor after every update by gathering the actor's parameters one at a time
(`sync_rollout_weights`), or, when the rollout has devices of its own, from weights gathered by the
actor's group and handed over by the controller: written by the actor's rank 0 into a shared-memory
buffer (`write_actor_weights`, one node) or returned pickled (`actor_weights`, Ray), then loaded by
every rollout rank (`load_rollout_weights`). The
controller drives it through a worker group (`call_sharded` for data, `call_all` for collectives);
every method that touches a sharded model is a collective and runs on all ranks of the group.
"""

from __future__ import annotations

import functools
import time
import os
import random
from collections import defaultdict
from dataclasses import replace

import numpy as np
import torch
import torch.distributed as dist

from hybridrl.config.schema import HybridRLConfig
from hybridrl.distributed.weight_handoff import (BufferSpec, SpilledWeights, WeightManifest, cast_to_cpu,
                                                 open_weights, write_weights)
from hybridrl.models.hf import load_causal_lm, load_policy_tokenizer, resolve_dtype
from hybridrl.rollout import SamplingParams
from hybridrl.rollout.engine.parallel import SINGLE, replica_groups
from hybridrl.utils.gc_time import gc_clock
from hybridrl.utils.memory import PhaseMemory, host_memory_metrics
from hybridrl.utils.batch import Batch
from hybridrl.utils.profiling import ProfileSpec, StepProfiler
from hybridrl.workers.actor import ActorWorker
from hybridrl.workers.critic import CriticWorker
from hybridrl.workers.reference import build_reference
from hybridrl.workers.rollout import RolloutWorker
from hybridrl.workers.sizes import BatchSizes

ROW_INDEX_KEY = "_global_row"  # a prompt row's index in the whole (repeated) batch: keys its sampling noise
ROLLOUT_METRICS_META = "_rollout_metrics_rank"  # meta key prefix carrying each rank's generation metrics
ROLES = ("actor", "rollout", "reference", "critic")


def _phase(name: str):
    """Record the method's peak device memory (this rank's PhaseMemory) and wall time under the trainer's
    phase `name`."""
    def wrap(method):
        @functools.wraps(method)
        def recorded(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                with self.memory.phase(name), self.profiler.phase(name):
                    return method(self, *args, **kwargs)
            finally:
                self.phase_seconds[name] += time.perf_counter() - start
        return recorded
    return wrap


class ColocatedWorker:
    def __init__(self, cfg: HybridRLConfig, *, total_steps: int, device_type: str, roles: tuple[str, ...] = ROLES):
        unknown = set(roles) - set(ROLES)
        if unknown:
            raise ValueError(f"unknown role(s) {sorted(unknown)}; a rank can host {ROLES}")
        self.rank, world_size = dist.get_rank(), dist.get_world_size()
        device = torch.device(device_type)
        self.memory = PhaseMemory(device)  # this rank's peaks per phase (`pop_phase_metrics`)
        self.phase_seconds: defaultdict[str, float] = defaultdict(float)  # this rank's wall time per phase
        gc_clock()  # timing_s/gc_rank from here on
        self.profiler = StepProfiler(f"rank{self.rank}", device)  # global_profiler: started by the controller
        _seed_everything(cfg.trainer.seed)  # every rank builds identical weights (e.g. a fresh value head)
        self.tokenizer = load_policy_tokenizer(cfg.actor_rollout_ref.model, trust_remote_code=cfg.data.trust_remote_code)
        sizes = BatchSizes.from_config(cfg, world_size)
        # The one-process construction order, so the RNG (e.g. a fresh value head) sees the same draws.
        self.actor = ActorWorker(cfg, sizes, device, total_steps) if "actor" in roles else None
        self.rollout_tp = SINGLE  # this rank's place in a tensor-parallel rollout replica (set by _build_rollout)
        self.rollout = self._build_rollout(cfg, device) if "rollout" in roles else None
        if self.actor is not None and self.rollout is not None:
            self.sync_rollout_weights()
        self.reference = build_reference(cfg, self.actor, sizes.ref_log_prob_micro, device) \
            if "reference" in roles else None
        self.critic = CriticWorker(cfg, sizes, device, total_steps) if "critic" in roles else None
        self.pop_phase_metrics()  # start-up (loading, the first weight sync) is not a step's

    def pop_phase_metrics(self) -> dict[str, float]:
        """Since the last call: this rank's `perf/max_memory_allocated_gb[/<phase>]` (on CPU the rank's peak
        resident set, as one process reports it) and `timing_s/<phase>_rank`, its wall time inside each
        phase. The controller keeps the max over ranks: `timing_s/<phase>` minus `timing_s/<phase>_rank` is
        what the controller adds (sharding, pickling, transport) and rank imbalance. Also `timing_s/gc_rank`:
        seconds this rank spent in Python's garbage collector."""
        metrics = self.memory.pop_metrics() if self.memory.enabled else host_memory_metrics()
        metrics.update({f"timing_s/{phase}_rank": seconds for phase, seconds in self.phase_seconds.items()})
        metrics["timing_s/gc_rank"] = gc_clock().end_step()
        self.phase_seconds.clear()
        return metrics

    def start_profile(self, spec: ProfileSpec, step: int) -> None:
        self.profiler.start(spec, step)

    def stop_profile(self, step: int) -> None:
        self.profiler.stop(step)

    def _build_rollout(self, cfg: HybridRLConfig, device: torch.device) -> RolloutWorker:
        """A plain copy of the initial policy (the actor's own module may be sharded) behind the backend."""
        model_cfg = cfg.actor_rollout_ref.model
        self.rollout_tp = replica_groups(cfg.actor_rollout_ref.rollout.tensor_model_parallel_size)
        replica = load_causal_lm(model_cfg.path, dtype=resolve_dtype(cfg.actor_rollout_ref.actor.fsdp_config.model_dtype),
                                 override_config=model_cfg.override_config,
                                 trust_remote_code=model_cfg.trust_remote_code)
        # the hf backend keeps the replica; the hybrid engine copies it (with tensor parallelism, this rank's
        # slices of it: the whole model never goes to the device)
        replica = replica.to(device) if self.rollout_tp.size == 1 else replica
        return RolloutWorker(cfg, replica.requires_grad_(False).eval(), self.tokenizer, device.type, replica=True,
                             tp=self.rollout_tp)

    # ------------------------------------------------------------------ actor / reference / critic
    @_phase("old_log_prob")
    def compute_log_prob(self, batch: Batch) -> Batch:
        return self._role("actor").compute_log_prob(batch)

    @_phase("update_actor")
    def update_actor(self, batch: Batch) -> dict[str, float]:
        return self._role("actor").update_actor(batch)

    @_phase("ref")
    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        return self._role("reference").compute_ref_log_prob(batch)

    @_phase("values")
    def compute_values(self, batch: Batch) -> Batch:
        return self._role("critic").compute_values(batch)

    @_phase("update_critic")
    def update_critic(self, batch: Batch) -> dict[str, float]:
        return self._role("critic").update_critic(batch)

    # ------------------------------------------------------------------ rollout
    @_phase("gen")
    def generate_sequences(self, prompts: Batch, params: SamplingParams) -> Batch:
        """`params.n` responses for each prompt of this rank's shard (the shard's rows may be repeats already,
        with n=1). ROW_INDEX_KEY holds each row's first sample's index in the whole batch: sampling is keyed by
        it where the backend supports it (hybrid engine), so the shards together sample what one process
        would; the metrics ride in `meta` per rank.
        """
        offset = int(prompts.pop(ROW_INDEX_KEY)[0])
        batch, metrics = self._role("rollout").generate_sequences(prompts, replace(params, row_offset=offset))
        if self.rollout_tp.rank != 0:  # a tensor-parallel replica answers once, from its first rank
            return Batch()
        batch.meta[f"{ROLLOUT_METRICS_META}{self.rank}"] = metrics
        return batch

    @_phase("update_weights")
    def sync_rollout_weights(self) -> None:
        """Gather the actor's parameters one at a time into the rollout replica (collective)."""
        rollout = self._role("rollout")
        rollout.sync_weights(self._role("actor").named_weights(rollout.weights_dtype))

    @_phase("update_weights")
    def actor_weights(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """The actor's full weights on CPU in `dtype` (the rollout's; None: as trained), on rank 0 ({} elsewhere),
        for a rollout on other ranks, sent pickled (collective)."""
        weights = {}
        for name, tensor in self._role("actor").named_weights(dtype):
            if self.rank == 0:
                weights[name] = cast_to_cpu(tensor, dtype, copy=True)
        return weights

    @_phase("update_weights")
    def write_actor_weights(self, spec: BufferSpec) -> WeightManifest | SpilledWeights | None:
        """Rank 0 writes the actor's full weights into the shared-memory buffer `spec` one tensor at a time and
        returns where each lies (None elsewhere); every rank takes part in the gather (collective)."""
        named = self._role("actor").named_weights(spec.dtype)
        if self.rank == 0:
            return write_weights(named, spec)
        for _ in named:
            pass
        return None

    @_phase("update_weights")
    def load_rollout_weights(self, weights: WeightManifest | dict[str, torch.Tensor]) -> None:
        """Load a handoff (a shared-memory manifest, or tensors sent pickled) into the rollout's engine."""
        self._role("rollout").sync_weights(open_weights(weights))

    # ------------------------------------------------------------------ checkpoints (collective)
    def save_checkpoint(self, role: str, role_dir: str, contents: list[str]) -> None:
        """Rank 0 writes the role's unsharded state in the one-process layout (so any world size resumes)."""
        from hybridrl.checkpoint.hf_export import LORA_ADAPTER_DIR, export_checkpoint, save_hf_metadata
        from hybridrl.checkpoint.manager import save_role

        worker = self._role(role)
        state = worker.state_dict()
        if self.rank != 0:
            return
        save_role(role_dir, state, contents)
        save_hf_metadata(worker.model, self.tokenizer, role_dir)
        if getattr(worker, "lora", False):  # the adapter in peft format, from the gathered state
            from hybridrl.models.lora import save_adapter

            save_adapter(worker.model, os.path.join(role_dir, LORA_ADAPTER_DIR), state["model"])
        if "hf_model" in contents:
            export_checkpoint(role_dir, os.path.join(role_dir, "huggingface"), role, is_value_model=role == "critic")

    def load_checkpoint(self, role: str, role_dir: str, contents: list[str]) -> None:
        """Every rank reads the unsharded files (one node, or a filesystem shared by the nodes)."""
        from hybridrl.checkpoint.manager import load_role, set_rng_state

        state = load_role(role_dir, contents)
        self._role(role).load_checkpoint_state(state)
        if "extra" in state:
            set_rng_state(state["extra"]["rng"])

    def _role(self, name: str):
        worker = getattr(self, name)
        if worker is None:
            raise RuntimeError(f"this worker group does not host the {name} role (placement or config)")
        return worker


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
