"""The asynchronous trainer's buffer: admission control, drop / wait past the off-policy threshold, checkpoints."""

from __future__ import annotations

import random

import pytest
import torch

from hybridrl.trainer.batch_sources.trajectory_buffer import FINISHED, QUEUED, RUNNING, TRAINING, TrajectoryBuffer
from hybridrl.utils.batch import Batch
from hybridrl.workers.request_pool import FinishedGroup

BATCH = 4


def prompts(rows: int = BATCH) -> Batch:
    return Batch(tensors={"input_ids": torch.arange(rows * 3).view(rows, 3),
                          "attention_mask": torch.ones(rows, 3, dtype=torch.long)},
                 non_tensors={"data_source": ["arith"] * rows})


def done(group_id: str, version: int) -> FinishedGroup:
    return FinishedGroup(group_id, [[1, 2]], [[-0.5, -0.25]], [version], [version], [0])


def test_admission_never_exceeds_threshold_times_batch_whatever_finishes_when():
    """A random schedule of finishes, steps and syncs: running + finished + training <= threshold x batch
    after every call, and every queued group eventually starts."""
    rng = random.Random(0)
    buffer = TrajectoryBuffer(BATCH, threshold=2, strategy="wait")
    data_index, version, trained = 0, 0, []
    for _ in range(60):
        if buffer.needs_prompts():
            data_index += 1
            buffer.add(prompts(), data_index, seed=data_index)
        buffer.admit(version)
        assert buffer.live <= 2 * BATCH
        running = [g.group_id for g in buffer.groups.values() if g.status == RUNNING]
        buffer.finish([done(group_id, version) for group_id in rng.sample(running, rng.randint(0, len(running)))])
        chosen = buffer.select(version + 1)
        assert buffer.live <= 2 * BATCH
        if chosen is not None:
            trained += [g.group_id for g in chosen]
            buffer.retire()
            version += 1
    assert version > 5 and len(trained) == len(set(trained)) == version * BATCH


def test_threshold_one_starts_the_next_batch_only_after_the_sync():
    """threshold 1 is the synchronous trainer: the batch in training holds every slot until its update is
    synced, so nothing generates with the weights it is about to replace."""
    buffer = TrajectoryBuffer(BATCH, threshold=1, strategy="drop")
    buffer.add(prompts(), 1, seed=1)
    buffer.add(prompts(), 2, seed=2)
    first = buffer.admit(version=0)
    assert [g.group_id for g in first] == [f"1-{i}" for i in range(BATCH)]
    buffer.finish([done(g.group_id, 0) for g in first])
    assert [g.group_id for g in buffer.select(version=0)] == [g.group_id for g in first]
    assert buffer.admit(version=0) == []  # the batch is training: no slot
    buffer.retire()
    assert [g.data_index for g in buffer.admit(version=1)] == [2] * BATCH


def test_drop_evicts_finished_groups_spanning_more_versions_than_the_threshold():
    buffer = TrajectoryBuffer(BATCH, threshold=2, strategy="drop")
    buffer.add(prompts(), 1, seed=1)
    started = buffer.admit(version=0)
    buffer.finish([done(g.group_id, 0) for g in started[:3]])  # 1-3 is the long tail
    assert buffer.select(version=1) is None  # 3 finished < 4: no batch yet
    buffer.finish([done("1-3", 2)])
    assert buffer.select(version=2) is None  # versions 0..2 span 3 > 2: all four evicted
    evicted = buffer.pop_evicted()
    assert sorted(g.group_id for g, _ in evicted) == [f"1-{i}" for i in range(BATCH)]
    assert {span for _, span in evicted} == {3} and buffer.live == 0


def test_drop_cancels_a_running_group_as_soon_as_it_can_no_longer_train_in_time():
    """Threshold 2: 1-0 runs on from version 0 while two batches train. Once the batch at version 1 is chosen,
    the earliest step left to train 1-0 is version 2 (a span of 3): it is evicted while running, handed out for
    the rollout to abort, its result from a round already under way is ignored, and its slot is free at once."""
    buffer = TrajectoryBuffer(BATCH, threshold=2, strategy="drop")
    buffer.add(prompts(), 1, seed=1)
    buffer.add(prompts(), 2, seed=2)
    buffer.admit(version=0)
    buffer.finish([done(g, 0) for g in ("1-1", "1-2", "1-3", "2-0")])
    assert [g.group_id for g in buffer.select(version=0)] == ["1-1", "1-2", "1-3", "2-0"]
    assert buffer.take_cancelled() == [] and buffer.pop_evicted() == []  # 1-0 may still train at version 1
    buffer.retire()
    buffer.add(prompts(), 3, seed=3)
    assert len(buffer.admit(version=1)) == BATCH
    buffer.finish([done(g, 1) for g in ("2-1", "2-2", "2-3", "3-0")])
    assert [g.group_id for g in buffer.select(version=1)] == ["2-1", "2-2", "2-3", "3-0"]
    buffer.finish([done("1-0", 1)])  # it finished in a round running beside the eviction (separate_async)
    assert "1-0" not in buffer.groups
    assert buffer.take_cancelled() == ["1-0"] and buffer.take_cancelled() == []
    assert [(g.group_id, g.status, span) for g, span in buffer.pop_evicted()] == [("1-0", RUNNING, 3)]
    assert buffer.count(RUNNING) == 3 and buffer.count(TRAINING) == BATCH  # 3-1..3-3 may train at version 2
    buffer.add(prompts(), 4, seed=4)
    assert [g.group_id for g in buffer.admit(version=1)] == ["4-0"]  # 1-0's slot


def test_drop_evicts_running_groups_already_over_the_threshold_before_choosing():
    buffer = TrajectoryBuffer(BATCH, threshold=2, strategy="drop")
    buffer.add(prompts(), 1, seed=1)
    buffer.admit(version=0)
    buffer.finish([done(g, 0) for g in ("1-0", "1-1")])
    assert buffer.select(version=2) is None
    assert sorted(g.group_id for g, _ in buffer.pop_evicted()) == [f"1-{i}" for i in range(BATCH)]
    assert buffer.take_cancelled() == ["1-2", "1-3"] and buffer.live == 0


def test_wait_holds_the_step_for_a_group_about_to_exceed_the_threshold():
    buffer = TrajectoryBuffer(BATCH, threshold=2, strategy="wait")
    buffer.add(prompts(), 1, seed=1)
    buffer.add(prompts(), 2, seed=2)
    started = buffer.admit(version=0)  # 8 groups: both batches
    buffer.finish([done(g.group_id, 0) for g in started if g.group_id != "1-0"])
    assert buffer.select(version=0) is not None  # span 1 < 2: batch 2's groups may train first
    buffer.retire()
    assert buffer.select(version=1) is None  # 1-0 would span 3 at the next step: wait for it
    buffer.finish([done("1-0", 1)])
    chosen = buffer.select(version=1)
    assert chosen is not None and "1-0" in [g.group_id for g in chosen]


def test_checkpoint_keeps_finished_groups_and_requeues_running_ones():
    buffer = TrajectoryBuffer(BATCH, threshold=2, strategy="drop")
    buffer.add(prompts(), 1, seed=11)
    buffer.add(prompts(), 2, seed=12)
    buffer.admit(version=0)
    buffer.finish([done("1-0", 0), done("2-1", 0)])
    restored = TrajectoryBuffer(BATCH, threshold=2, strategy="drop")
    restored.load_state_dict(buffer.state_dict())
    assert {k: g.status for k, g in restored.groups.items()} == {
        k: (FINISHED if k in ("1-0", "2-1") else QUEUED) for k in buffer.groups}
    assert restored.groups["2-1"].result == done("2-1", 0) and restored.groups["2-1"].start_version == 0
    assert restored.groups["1-2"].seed == 11 and restored.groups["1-2"].start_version is None
    assert torch.equal(restored.groups["2-3"].prompt["input_ids"], buffer.groups["2-3"].prompt["input_ids"])
    assert list(restored.groups["2-3"].prompt.non_tensors["data_source"]) == ["arith"]


def test_a_group_in_training_is_not_saved():
    """A checkpoint is taken after the step's update: its batch is trained, so it is not saved again."""
    buffer = TrajectoryBuffer(BATCH, threshold=1, strategy="drop")
    buffer.add(prompts(), 1, seed=1)
    buffer.finish([done(g.group_id, 0) for g in buffer.admit(version=0)])
    assert all(g.status == TRAINING for g in buffer.select(version=0))
    assert buffer.state_dict() == {"groups": []}


def test_unknown_finished_group_and_bad_settings_are_refused():
    buffer = TrajectoryBuffer(BATCH, threshold=1, strategy="drop")
    with pytest.raises(RuntimeError, match="does not run"):
        buffer.finish([done("9-9", 0)])
    with pytest.raises(ValueError, match="max_off_policy_threshold=0"):
        TrajectoryBuffer(BATCH, threshold=0, strategy="drop")
    with pytest.raises(ValueError, match="max_off_policy_strategy='skip'"):
        TrajectoryBuffer(BATCH, threshold=1, strategy="skip")
