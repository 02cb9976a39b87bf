"""One rank of a worker group hosting some or all roles (actor, rollout replica, reference, critic).

Every run hosts its roles on these ranks; one process is a one-rank group in the controller's own process
(`InProcessGroup`), the same class with no processes. With every role (the default hybrid placement) it is
verl's colocated `ActorRolloutRefWorker` (+ critic) in one process: the roles take turns on the rank's
device. The actor, reference and critic are spread over the group by `workers.parallel`. The rollout
generates the rank's shard of the prompts: with the actor's own module when that module is whole on this
device alone (one rank), else with a plain copy of the policy, refreshed from the actor after every update
by gathering the actor's parameters one unit at a time (`sync_rollout_weights`), or, when the rollout has
devices of its own, from weights gathered by the actor's group and handed over by the controller: written by
the actor's rank 0 into a shared-memory buffer (`write_actor_weights`, one node) or returned pickled
(`actor_weights`, Ray), then loaded by every rollout rank (`load_rollout_weights`). The controller drives
it through a worker group (`call_sharded` for data, `call_all` for collectives); every method that touches
a sharded model is a collective and runs on all ranks of the group.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from typing import TypeVar

import numpy as np
import torch

from hybridrl.config.batch_sizes import BatchSizes
from hybridrl.config.run_plan import RANK_ROLES, RunPlan
from hybridrl.config.schema import HybridRLConfig
from hybridrl.distributed.weight_handoff import BufferSpec, Payload, cast_to_cpu, write_weights
from hybridrl.models.hf import load_causal_lm, load_policy_tokenizer, resolve_dtype
from hybridrl.rollout import SamplingParams
from hybridrl.rollout.engine.parallel import SINGLE, replica_groups
from hybridrl.utils.batch import Batch
from hybridrl.utils.collectives import rank_and_world_size
from hybridrl.utils.profiling import ProfileSpec
from hybridrl.workers.actor import ActorWorker
from hybridrl.workers.critic import CriticWorker
from hybridrl.workers.rank_phases import RankPhases
from hybridrl.workers.reference import build_reference
from hybridrl.workers.request_pool import FinishedGroup, GroupRequest
from hybridrl.workers.rollout import RolloutWorker
from hybridrl.workers.teacher import TeacherWorker

T = TypeVar("T")
ROW_INDEX_KEY = "_global_row"  # a prompt row's index in the whole (repeated) batch: keys its sampling noise
ROLLOUT_METRICS_META = "_rollout_metrics_rank"  # meta key prefix carrying each rank's generation metrics


class ColocatedWorker:
    def __init__(self, cfg: HybridRLConfig, plan: RunPlan, *, roles: tuple[str, ...] = RANK_ROLES,
                 total_steps: int, measure_phases: bool = True):
        """`measure_phases`: False in the controller's own process, whose phases the controller measures."""
        unknown = set(roles) - set(RANK_ROLES)
        if unknown:
            raise ValueError(f"unknown role(s) {sorted(unknown)}; a rank can host {RANK_ROLES}")
        self.rank, world_size = rank_and_world_size()
        device = torch.device(plan.device)
        self.phases = RankPhases(f"rank{self.rank}", device, enabled=measure_phases)
        _seed_everything(cfg.trainer.seed)  # every rank builds identical weights (e.g. a fresh value head)
        self.tokenizer = load_policy_tokenizer(cfg.actor_rollout_ref.model, trust_remote_code=cfg.data.trust_remote_code)
        sizes = BatchSizes.from_config(cfg, world_size)
        # Always this construction order, so the RNG (e.g. a fresh value head) draws as in one process.
        self.actor = ActorWorker(cfg, sizes, device, total_steps) if "actor" in roles else None
        self.rollout_tp = SINGLE  # this rank's place in a tensor-parallel rollout replica (set by _build_rollout)
        self.rollout = self._build_rollout(cfg, plan, device) if "rollout" in roles else None
        self.reference = build_reference(cfg, self.actor, sizes.ref_log_prob_micro, device) \
            if "reference" in roles else None
        self.critic = CriticWorker(cfg, sizes, device, total_steps) if "critic" in roles else None
        self.teacher = TeacherWorker(cfg, sizes.ref_log_prob_micro, device, self.tokenizer) \
            if "teacher" in roles else None
        self.pop_phase_metrics()  # start-up (loading, the first weight sync) is not a step's

    def pop_phase_metrics(self) -> dict[str, float]:
        """This rank's `perf/max_memory_allocated_gb[/<phase>]`, `timing_s/<phase>_rank` and `timing_s/gc_rank`
        since the last call (`RankPhases.pop_metrics`; none in the controller's own process)."""
        return self.phases.pop_metrics()

    def start_profile(self, spec: ProfileSpec, step: int) -> None:
        self.phases.start_profile(spec, step)

    def stop_profile(self, step: int) -> None:
        self.phases.stop_profile(step)

    def _build_rollout(self, cfg: HybridRLConfig, plan: RunPlan, device: torch.device) -> RolloutWorker:
        """Beside an actor whole on this device the rollout uses the actor's module; otherwise a plain copy of
        the initial policy, loaded from the model path (the actor's own module may be sharded or elsewhere)."""
        self.rollout_tp = replica_groups(cfg.actor_rollout_ref.rollout.tensor_model_parallel_size)
        if self.actor is not None and self.actor.parallel.single_device and self.rollout_tp.size == 1:
            return self._rollout_beside(cfg, plan, self.actor)
        model_cfg = cfg.actor_rollout_ref.model
        replica = load_causal_lm(model_cfg.path, dtype=resolve_dtype(cfg.actor_rollout_ref.actor.fsdp_config.model_dtype),
                                 override_config=model_cfg.override_config,
                                 trust_remote_code=model_cfg.trust_remote_code, use_shm=model_cfg.use_shm,
                                 fp32_residual=model_cfg.fp32_residual_stream)
        # the hf backend keeps the replica; the hybrid engine copies it (with tensor parallelism, this rank's
        # slices of it: the whole model never goes to the device)
        replica = replica.to(device) if self.rollout_tp.size == 1 else replica
        rollout = RolloutWorker(cfg, plan, replica.requires_grad_(False).eval(), self.tokenizer, replica=True,
                                tp=self.rollout_tp)
        if self.actor is not None:
            rollout.sync_weights(self.actor.named_weights(rollout.weights_dtype))
        return rollout

    def _rollout_beside(self, cfg: HybridRLConfig, plan: RunPlan, actor: ActorWorker) -> RolloutWorker:
        """The hf backend generates with the actor's module itself (weight sync is free) and our engine is built
        from it, except that the engine cannot read a PEFT-wrapped module: it is built from the base model
        directory and given base + adapter merged."""
        lora_engine = actor.lora and plan.rollout_backend == "hybrid"
        source = cfg.actor_rollout_ref.model.path if lora_engine else actor.model
        rollout = RolloutWorker(cfg, plan, source, self.tokenizer, model_context=actor.offloader.for_compute)
        if actor.lora:
            rollout.sync_weights(actor.named_weights())
        return rollout

    # ------------------------------------------------------------------ actor / reference / critic
    def compute_log_prob(self, batch: Batch) -> Batch:
        with self.phases.phase("old_log_prob"):
            return self._actor().compute_log_prob(batch)

    def update_actor(self, batch: Batch) -> dict[str, float]:
        with self.phases.phase("update_actor"):
            return self._actor().update_actor(batch)

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        with self.phases.phase("ref"):
            return self._present(self.reference, "reference").compute_ref_log_prob(batch)

    def compute_teacher_log_probs(self, batch: Batch) -> Batch:
        with self.phases.phase("teacher"):
            return self._present(self.teacher, "teacher").compute_teacher_log_probs(batch)

    def compute_values(self, batch: Batch) -> Batch:
        with self.phases.phase("values"):
            return self._critic().compute_values(batch)

    def update_critic(self, batch: Batch) -> dict[str, float]:
        with self.phases.phase("update_critic"):
            return self._critic().update_critic(batch)

    # ------------------------------------------------------------------ rollout
    def generate_sequences(self, prompts: Batch, params: SamplingParams) -> Batch:
        """`params.n` responses for each prompt of this rank's shard (the shard's rows may be repeats already,
        with n=1). ROW_INDEX_KEY holds each row's first sample's index in the whole batch: sampling is keyed by
        it where the backend supports it (hybrid engine), so the shards together sample what one process
        would; the metrics ride in `meta` per rank.
        """
        offset = int(prompts.pop(ROW_INDEX_KEY)[0])
        with self.phases.phase("gen"):
            batch, metrics = self._rollout().generate_sequences(prompts, replace(params, row_offset=offset))
        if self.rollout_tp.rank != 0:  # a tensor-parallel replica answers once, from its first rank
            return Batch()
        batch.meta[f"{ROLLOUT_METRICS_META}{self.rank}"] = metrics
        return batch

    # ---- request-level generation (asynchronous training): every rank of a replica runs the same calls ----
    def submit_groups(self, groups: list[GroupRequest], params: SamplingParams, version: int) -> None:
        """Start the groups assigned to this rank's replica (`GroupRequest.replica`); every rank gets the list."""
        mine = [group for group in groups if group.replica == self.rank // self.rollout_tp.size]
        with self.phases.phase("gen"):
            self._rollout().submit_groups(mine, params, version)

    def advance_groups(self, max_steps: int, version: int) -> list[FinishedGroup]:
        """Step this replica's engine (`RolloutWorker.advance_groups`); its first rank answers."""
        with self.phases.phase("gen"):
            finished = self._rollout().advance_groups(max_steps, version)
        return finished if self.rollout_tp.rank == 0 else []

    def park_groups(self, sleep: bool) -> dict[str, float]:
        with self.phases.phase("gen"):
            metrics = self._rollout().park_groups(sleep)
        return metrics if self.rollout_tp.rank == 0 else {}

    def forget_groups(self, group_ids: list[str] | None = None) -> None:
        self._rollout().forget_groups(group_ids)

    def sync_rollout_weights(self) -> None:
        """The actor's weights into the rollout beside it: gathered one unit at a time when sharded (collective);
        nothing to copy when the hf backend generates with the actor's own module."""
        rollout = self._rollout()
        with self.phases.phase("update_weights"):
            rollout.sync_weights(self._actor().named_weights(rollout.weights_dtype))

    def actor_weights(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """The actor's full weights on CPU in `dtype` (the rollout's; None: as trained), on rank 0 ({} elsewhere),
        for a rollout on other ranks, sent pickled (collective)."""
        weights = {}
        with self.phases.phase("update_weights"):
            for name, tensor in self._actor().named_weights(dtype):
                if self.rank == 0:
                    weights[name] = cast_to_cpu(tensor, dtype, copy=True)
        return weights

    def write_actor_weights(self, spec: BufferSpec) -> Payload | None:
        """Rank 0 writes the actor's full weights into the shared-memory buffer `spec` one tensor at a time and
        returns where each lies (None elsewhere); every rank takes part in the gather (collective)."""
        with self.phases.phase("update_weights"):
            named = self._actor().named_weights(spec.dtype)
            if self.rank == 0:
                return write_weights(named, spec)
            for _ in named:
                pass
            return None

    def load_rollout_weights(self, weights: Payload) -> None:
        """Load a handoff (a shared-memory manifest, or tensors sent pickled) into the rollout's engine."""
        with self.phases.phase("update_weights"):
            self._rollout().sync_weights(weights.open())

    # ------------------------------------------------------------------ checkpoints (collective)
    def save_checkpoint(self, role: str, role_dir: str, contents: list[str]) -> None:
        """Rank 0 writes the role's unsharded state in the one-process layout (so any world size resumes)."""
        from hybridrl.checkpoint.hf_export import LORA_ADAPTER_DIR, export_checkpoint, save_hf_metadata
        from hybridrl.checkpoint.manager import save_role

        worker = self._trainable(role)
        state = worker.state_dict()
        if self.rank != 0:
            return
        save_role(role_dir, state, contents)
        save_hf_metadata(worker.model, self.tokenizer, role_dir)
        if worker.lora:  # the adapter in peft format, what LoRA users ship, from the gathered state
            from hybridrl.models.lora import save_adapter

            save_adapter(worker.model, os.path.join(role_dir, LORA_ADAPTER_DIR), state["model"])
        if "hf_model" in contents:
            export_checkpoint(role_dir, os.path.join(role_dir, "huggingface"), role, is_value_model=role == "critic")

    def load_checkpoint(self, role: str, role_dir: str, contents: list[str]) -> None:
        """Every rank reads the unsharded files (one node, or a filesystem shared by the nodes)."""
        from hybridrl.checkpoint.role_files import restore_role

        restore_role(self._trainable(role), role_dir, contents)  # then rank 0 checks the weights against the manifest

    def _actor(self) -> ActorWorker:
        return self._present(self.actor, "actor")

    def _critic(self) -> CriticWorker:
        return self._present(self.critic, "critic")

    def _rollout(self) -> RolloutWorker:
        return self._present(self.rollout, "rollout")

    def _trainable(self, role: str) -> ActorWorker | CriticWorker:
        """The role whose state a checkpoint holds (the actor or the critic)."""
        if role not in ("actor", "critic"):
            raise ValueError(f"checkpoints hold the actor's and the critic's state, not the {role}'s")
        return self._actor() if role == "actor" else self._critic()

    @staticmethod
    def _present(worker: T | None, name: str) -> T:
        if worker is None:
            raise RuntimeError(f"this worker group does not host the {name} role (placement or config)")
        return worker


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
