"""The launcher-independent dispatch rules (shard/pad/unpad, metric reduction) and InProcessGroup."""

from __future__ import annotations

import pytest
import torch

from hybridrl.distributed.errors import GroupClosedError
from hybridrl.distributed.worker_group import (
    InProcessGroup,
    WorkerGroup,
    gather_shards,
    reduce_rank_metrics,
    shard_batch,
)
from hybridrl.utils.batch import Batch


def rows(n: int) -> Batch:
    return Batch(tensors={"x": torch.arange(n)}, non_tensors={"uid": [f"u{i}" for i in range(n)]})


def test_shard_pads_with_leading_rows_and_gather_strips_them():
    shards, num_padded = shard_batch(rows(5), 2)
    assert num_padded == 1 and [s["x"].tolist() for s in shards] == [[0, 1, 2], [3, 4, 0]]
    out = gather_shards(shards, shards, num_padded, "actor", "m")
    assert out["x"].tolist() == [0, 1, 2, 3, 4] and list(out["uid"]) == ["u0", "u1", "u2", "u3", "u4"]
    shards, num_padded = shard_batch(rows(1), 4)  # fewer rows than ranks: every rank gets a copy
    assert num_padded == 3 and [s["x"].tolist() for s in shards] == [[0], [0], [0], [0]]


def test_gather_rejects_changed_row_counts_and_non_batches():
    shards, _ = shard_batch(rows(4), 2)
    with pytest.raises(ValueError, match="actor.m on rank 1 returned 1 rows for a shard of 2"):
        gather_shards([shards[0], shards[1].index([0])], shards, 0, "actor", "m")
    with pytest.raises(TypeError, match="returned dict; call_sharded needs a Batch"):
        gather_shards([shards[0], {}], shards, 0, "actor", "m")
    with pytest.raises(ValueError, match="empty batch"):
        shard_batch(Batch(), 2)


def test_gather_takes_several_output_rows_per_input_row():
    """A prompt's n samples come back together; the padding prompt's samples are dropped with it."""
    shards, num_padded = shard_batch(rows(5), 2)
    outputs = [shard.repeat(3, interleave=True) for shard in shards]
    out = gather_shards(outputs, shards, num_padded, "rollout", "generate", rows_per_row=3)
    assert out["x"].tolist() == rows(5).repeat(3)["x"].tolist()
    with pytest.raises(ValueError, match="returned 3 rows for a shard of 3; the call expects 3 output row"):
        gather_shards([outputs[0], shards[1]], shards, num_padded, "rollout", "generate", rows_per_row=3)


def test_metrics_reduce_by_name_across_ranks():
    per_rank = [{"actor/pg_loss": 1.0, "actor/grad_norm_max": [2.0, 5.0], "critic/vpred_min": 0.5},
                {"actor/pg_loss": [2.0, 3.0], "actor/grad_norm_max": 4.0, "critic/vpred_min": -1.0}]
    assert reduce_rank_metrics(per_rank, "actor", "m") == {
        "actor/pg_loss": 2.0, "actor/grad_norm_max": 5.0, "critic/vpred_min": -1.0}
    with pytest.raises(ValueError, match="ranks disagree on metric names"):
        reduce_rank_metrics([{"a": 1.0}, {"b": 1.0}], "actor", "m")


class Echo:
    def double(self, batch: Batch) -> Batch:
        return Batch(tensors={"y": batch["x"] * 2})

    def metrics(self, batch: Batch) -> dict:
        return {"loss": [1.0, 3.0]}

    def hello(self, name: str) -> str:
        return f"hi {name}"


def test_in_process_group():
    group = InProcessGroup(Echo(), role="reward")
    assert isinstance(group, WorkerGroup) and group.world_size == 1
    assert group.call_all("hello", "a") == ["hi a"] and group.call_rank0("hello", name="b") == "hi b"
    assert group.call_sharded("double", rows(3))["y"].tolist() == [0, 2, 4]
    assert group.call_sharded_metrics("metrics", rows(3)) == {"loss": 2.0}
    with pytest.raises(AttributeError, match="reward worker Echo has no method 'nope'"):
        group.call_all("nope")
    group.shutdown()
    with pytest.raises(GroupClosedError):
        group.call_rank0("hello", "c")
