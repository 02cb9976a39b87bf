"""The roles as the trainer sees them: small typed interfaces, one per role.

Whatever the run mode (one process, colocated ranks, separate groups, Ray), the trainer holds one object per
role that satisfies these and drives every phase through it. The actor, rollout, reference and critic are
proxies over worker groups (`workers.role_groups`, `workers.rollout_group`): each method says how it reaches
the ranks (all of them, or the batch sharded over them). The reward role and a remote critic run on the
controller. Tests substitute their own objects for any of them.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Protocol, runtime_checkable

from hybridrl.distributed import WorkerGroup
from hybridrl.distributed.weight_handoff import Payload
from hybridrl.rollout import SamplingParams
from hybridrl.utils.batch import Batch
from hybridrl.workers.request_pool import FinishedGroup, GroupRequest

Scores = tuple[Batch, dict[str, list], dict[str, float]]  # token_level_scores, per-row extra info, metrics


class ActorRole(Protocol):
    def compute_log_prob(self, batch: Batch) -> Batch:
        """old_log_probs and entropys (B, R) under the current policy (sharded)."""
        ...

    def update_actor(self, batch: Batch) -> dict[str, float]:
        """The PPO update; metrics reduced over the ranks (sharded)."""
        ...

    def save_checkpoint(self, role_dir: str, contents: list[str]) -> None:
        """Unsharded state in the one-process layout, written by rank 0 (all ranks gather)."""
        ...

    def load_checkpoint(self, role_dir: str, contents: list[str]) -> None:
        """Every rank reads the unsharded files and keeps its part."""
        ...


class ReferenceRole(Protocol):
    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        """ref_log_prob (B, R) under the frozen initial policy (sharded)."""
        ...


class TeacherRole(Protocol):
    def compute_teacher_log_probs(self, batch: Batch) -> Batch:
        """teacher_logprobs (B, R) or (B, R, k) and, for top-k, teacher_ids (B, R, k): each row scored by its
        teacher (on-policy distillation; sharded)."""
        ...


class CriticRole(Protocol):
    def compute_values(self, batch: Batch) -> Batch:
        """values (B, R) (sharded)."""
        ...

    def update_critic(self, batch: Batch) -> dict[str, float]:
        ...

    def save_checkpoint(self, role_dir: str, contents: list[str]) -> None:
        """Nothing for a frozen remote critic, which has no state."""
        ...

    def load_checkpoint(self, role_dir: str, contents: list[str]) -> None:
        ...


class RolloutRole(Protocol):
    """Generation over the rollout's replicas: those of its own group, and replica groups lent to it at runtime
    (elastic rollout), each holding no training state."""

    @property
    def devices(self) -> list[int]:
        """The devices generating now: the group's own, then the borrowed ones."""
        ...

    def generate_sequences(self, prompts: Batch, params: SamplingParams) -> tuple[Batch, dict[str, float]]:
        """`params.n` responses per prompt, rows in one process's order (a prompt's samples together)."""
        ...

    def sync_weights(self) -> dict[str, float]:
        """The actor's current weights into every replica; the handoff's metrics when weights left the
        actor's ranks (perf/update_weights_gb), else none."""
        ...

    def add_replicas(self, groups: dict[int, WorkerGroup]) -> None:
        """Lend these one-rank rollout groups (by device) to the rollout, loaded with the current weights; a group
        that fails to load them is stopped and left out, with a warning."""
        ...

    def release_replicas(self, devices: list[int]) -> None:
        """Stop the borrowed replicas on `devices`."""
        ...

    def replica_phase_metrics(self) -> dict[str, float]:
        """Peaks and rank times of the borrowed replicas since the last call (the own group's come with the run's
        other groups)."""
        ...


@runtime_checkable
class RequestRolloutRole(RolloutRole, Protocol):
    """The rollout's request-level calls, for the asynchronous trainer modes (workers/request_pool.py): groups
    submitted, stepped, parked (aborted, tokens kept) and resumed on the replicas of the rollout's own group."""

    @property
    def num_replicas(self) -> int:
        ...

    def submit_groups(self, groups: list[GroupRequest], params: SamplingParams, version: int) -> None:
        ...

    def advance_groups(self, max_steps: int, version: int) -> list[FinishedGroup]:
        """Resume what is parked at policy `version`, step every replica up to `max_steps` times; the finished groups."""
        ...

    def park_groups(self, sleep: bool) -> dict[str, float]:
        """Abort the requests in flight keeping their tokens (and free the KV cache with `sleep`)."""
        ...

    def forget_groups(self, group_ids: list[str] | None = None) -> None:
        """Drop these groups (None: every group), aborting what of them runs."""
        ...

    def gather_weights(self) -> Payload:
        """The actor's weights gathered for rollout devices of their own."""
        ...

    def load_weights(self, payload: Payload) -> dict[str, float]:
        ...


class RewardRole(Protocol):
    scores_with_model: bool  # a reward model (it needs the device: scoring stays synchronous)

    def compute_scores(self, batch: Batch, validate: bool = False) -> Scores:
        ...

    def score_in_background(self, batch: Batch) -> Future[Scores]:
        """`compute_scores(batch)` on a daemon thread nobody joins (reward_model.launch_reward_fn_async)."""
        ...

    def close(self) -> None:
        ...
