"""The asynchronous trainer's buffer of prompt groups (a prompt and its n samples), from queued to trained.

A group is `queued` (its prompt taken from the loader), `running` (submitted to a rollout replica), `finished`
(every sample done) or `training` (in this step's batch, until the update trained on it reaches the rollout).

Admission control (AReaL's `StalenessManager`, SkyRL's): a queued group starts only while
running + finished + training < threshold x train_batch_size, `threshold` = trainer.v1.sampler.
max_off_policy_threshold. Counting the batch in training until its update is synced makes threshold 1 the
synchronous trainer: the next batch starts generating only with the weights that trained on the last one. So
no more stale work starts than the bound allows, rather than generating and then discarding it (which starves
long, hard prompts). What still exceeds the threshold, a group that ran long while newer ones finished, is
handled by `max_off_policy_strategy`: `drop` evicts it as soon as it can no longer be trained within the threshold,
finished or still running (a running one is cancelled in the rollout, so no more is generated for it; a new
prompt takes its slot), `wait` holds the step until a group about to exceed it has finished, so it is trained in
time.

Versions count the weight syncs: the policy that step k trains is version k - 1. A group admitted at version s
and trained at version v spans v - s + 1 versions; `drop` evicts spans over the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hybridrl.utils.batch import Batch
from hybridrl.workers.request_pool import FinishedGroup

QUEUED, RUNNING, FINISHED, TRAINING = "queued", "running", "finished", "training"


@dataclass
class GroupRecord:
    """One prompt group. `group_id` is `<data_index>-<position>`, the uid the synchronous trainer gives the same
    prompt when it trains batch `data_index` (seeded alike, the sync trainer samples the same tokens)."""

    group_id: str
    data_index: int  # which loader batch (1-based) it came from
    position: int  # its row in that batch
    prompt: Batch  # the loader's row (one row: tensors and per-row fields)
    seed: int
    status: str = QUEUED
    start_version: int | None = None
    result: FinishedGroup | None = None

    @property
    def order(self) -> tuple[int, int]:
        return self.data_index, self.position


class TrajectoryBuffer:
    def __init__(self, train_batch_size: int, threshold: int, strategy: str) -> None:
        if threshold < 1:
            raise ValueError(f"trainer.v1.sampler.max_off_policy_threshold={threshold} must be >= 1 (1 = on-policy)")
        if strategy not in ("drop", "wait"):
            raise ValueError(f"trainer.v1.sampler.max_off_policy_strategy={strategy!r} must be drop or wait")
        self.batch_size, self.threshold, self.strategy = train_batch_size, threshold, strategy
        self.capacity = threshold * train_batch_size
        self.groups: dict[str, GroupRecord] = {}  # insertion order = queue order
        self.evicted: list[tuple[GroupRecord, int]] = []  # (group, its span) dropped since the last pop
        self.cancelled: set[str] = set()  # running groups evicted, to abort in the rollout (`take_cancelled`)

    # ------------------------------------------------------------------ counts
    def count(self, *statuses: str) -> int:
        return sum(group.status in statuses for group in self.groups.values())

    @property
    def live(self) -> int:
        """Groups holding an admission slot: started and not yet retired."""
        return self.count(RUNNING, FINISHED, TRAINING)

    def needs_prompts(self) -> bool:
        """True when a slot is free and no queued prompt could take it: the loader must supply more."""
        return self.count(QUEUED) == 0 and self.live < self.capacity

    # ------------------------------------------------------------------ life cycle
    def add(self, prompts: Batch, data_index: int, seed: int) -> None:
        """Queue one loader batch, its rows as groups `<data_index>-<row>`."""
        for row in range(len(prompts)):
            group_id = f"{data_index}-{row}"
            if group_id in self.groups:
                raise ValueError(f"prompt group {group_id} is already in the trajectory buffer")
            self.groups[group_id] = GroupRecord(group_id, data_index, row, prompts.index([row]), seed)

    def admit(self, version: int) -> list[GroupRecord]:
        """Start queued groups, oldest first, while the admission bound allows; they run from `version` on."""
        free = self.capacity - self.live
        started = []
        for group in self.groups.values():
            if free <= 0:
                break
            if group.status == QUEUED:
                group.status, group.start_version = RUNNING, version
                started.append(group)
                free -= 1
        return started

    def finish(self, results: list[FinishedGroup]) -> None:
        for result in results:
            if result.group_id in self.cancelled:
                continue  # evicted while it ran; it finished before the rollout heard of the eviction
            group = self.groups.get(result.group_id)
            if group is None or group.status != RUNNING:
                raise RuntimeError(f"the rollout returned group {result.group_id!r}, which this buffer does not run "
                                   f"({'unknown' if group is None else group.status})")
            group.status, group.result = FINISHED, result

    def select(self, version: int) -> list[GroupRecord] | None:
        """This step's batch (the oldest finished groups), when one exists under the off-policy strategy; the
        policy trained now is `version`. `drop` evicts the groups that can no longer be trained within the
        threshold: before choosing, those spanning too many versions now; after choosing, those that will at the
        next step, the earliest one that can train them."""
        if self.strategy == "drop":
            self._evict_spans_over_threshold(version)
        elif any(g.status == RUNNING and self.span(g, version) >= self.threshold for g in self.groups.values()):
            return None  # wait: a group would exceed the threshold at the next step; train it in this one
        finished = sorted((g for g in self.groups.values() if g.status == FINISHED), key=lambda g: g.order)
        if len(finished) < self.batch_size:
            return None
        chosen = finished[:self.batch_size]
        for group in chosen:
            group.status = TRAINING
        if self.strategy == "drop":
            self._evict_spans_over_threshold(version + 1)
        return chosen

    def _evict_spans_over_threshold(self, version: int) -> None:
        """`drop`: evict the finished and running groups spanning more than the threshold if trained at `version`;
        the running ones are cancelled in the rollout too."""
        for group in [g for g in self.groups.values() if g.status in (FINISHED, RUNNING)]:
            span = self.span(group, version)
            if span > self.threshold:
                self.evicted.append((group, span))
                if group.status == RUNNING:
                    self.cancelled.add(group.group_id)
                del self.groups[group.group_id]

    def take_cancelled(self) -> list[str]:
        """The running groups evicted since the last call, for the rollout to abort (`forget_groups`)."""
        cancelled, self.cancelled = sorted(self.cancelled), set()
        return cancelled

    def retire(self) -> None:
        """The update that trained on this step's batch reached the rollout: its slots are free."""
        self.groups = {key: g for key, g in self.groups.items() if g.status != TRAINING}

    def pop_evicted(self) -> list[tuple[GroupRecord, int]]:
        evicted, self.evicted = self.evicted, []
        return evicted

    @staticmethod
    def span(group: GroupRecord, version: int) -> int:
        """Policy versions from the group's start to `version` (the policy training on it), both counted."""
        return version - (group.start_version if group.start_version is not None else version) + 1

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Finished groups with their samples; queued and running ones as prompts only (a resumed run re-issues
        them from scratch: their partial tokens belong to engines that are gone)."""
        return {"groups": [_group_state(g) for g in self.groups.values() if g.status != TRAINING]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.groups, self.cancelled = {}, set()  # the resumed run's rollout starts with no groups at all
        for entry in state["groups"]:
            group = _group_from_state(entry)
            self.groups[group.group_id] = group


def _group_state(group: GroupRecord) -> dict[str, Any]:
    finished = group.status == FINISHED
    result = group.result if finished else None
    return {
        "group_id": group.group_id, "data_index": group.data_index, "position": group.position, "seed": group.seed,
        "status": FINISHED if finished else QUEUED, "start_version": group.start_version if finished else None,
        "prompt": {"tensors": dict(group.prompt.tensors),
                   "non_tensors": {key: list(value) for key, value in group.prompt.non_tensors.items()}},
        "result": None if result is None else {
            "token_ids": result.token_ids, "log_probs": result.log_probs, "min_versions": result.min_versions,
            "max_versions": result.max_versions, "num_resumes": result.num_resumes},
    }


def _group_from_state(entry: dict[str, Any]) -> GroupRecord:
    prompt = Batch(tensors={k: torch.as_tensor(v) for k, v in entry["prompt"]["tensors"].items()},
                   non_tensors=entry["prompt"]["non_tensors"])
    result = entry["result"]
    return GroupRecord(entry["group_id"], entry["data_index"], entry["position"], prompt, entry["seed"],
                       status=entry["status"], start_version=entry["start_version"],
                       result=None if result is None else FinishedGroup(group_id=entry["group_id"], **result))
