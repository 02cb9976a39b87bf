"""Whole replicas (fsdp_size=1): gradients averaged over gloo ranks; an actor trained on 2 ranks that way
holds plain tensors, the same weights on both ranks, and the weights one process gets from the whole batch."""

from __future__ import annotations

import pytest
import torch

from hybridrl.distributed.local_launcher import LocalWorkerGroup
from tests.distributed.toy_workers import GradientAveragingRank
from tests.workers.helpers import build_actor, ragged_batch

REPLICAS = ["actor_rollout_ref.actor.fsdp_config.fsdp_size=1"]


@pytest.mark.parametrize("bucket_bytes", [1, 64, 1 << 20])  # a bucket per gradient, a few, one per dtype
def test_gradients_become_the_mean_over_ranks_in_any_bucketing(bucket_bytes):
    with LocalWorkerGroup(GradientAveragingRank, {}, world_size=2, role="replicas") as group:
        per_rank = group.call_all("average", bucket_bytes)
    want = {"a": 1.5, "b": (11 + 0) / 2, "c": 21.5, "d": 31.5}  # rank r adds r+1; rank 1 has no grad for b
    for grads in per_rank:
        for name, value in want.items():
            assert torch.equal(grads[name], torch.full_like(grads[name], value)), name
    assert per_rank[0]["c"].dtype == torch.float64


class ReplicaActorRank:
    def __init__(self, model_dir: str) -> None:
        torch.set_num_threads(1)
        self.actor = build_actor(model_dir, REPLICAS, world_size=torch.distributed.get_world_size())

    def update_actor(self, batch):
        return self.actor.update_actor(batch)

    def weights(self) -> dict:
        params = dict(self.actor.model.named_parameters())
        return {"plain": all(type(p) is torch.nn.Parameter for p in params.values()),
                "replicas": self.actor.replicas, "state": {k: v.detach().clone() for k, v in params.items()}}


def test_replica_actors_stay_equal_and_train_as_one_process_on_the_whole_batch(tiny_model_dir):
    batch = ragged_batch(num_rows=8, seed=5)
    one = build_actor(tiny_model_dir, REPLICAS)  # one process: fsdp_size has nothing to replicate
    assert not one.replicas
    for _ in range(2):
        one.update_actor(batch)
    with LocalWorkerGroup(ReplicaActorRank, {"model_dir": tiny_model_dir}, world_size=2, role="actor") as group:
        for _ in range(2):
            group.call_sharded_metrics("update_actor", batch)
        ranks = group.call_all("weights")
    assert all(rank["plain"] and rank["replicas"] for rank in ranks)  # no FSDP, no DTensors
    for name, want in one.model.named_parameters():
        assert torch.equal(ranks[0]["state"][name], ranks[1]["state"][name]), name  # the copies never drift
        torch.testing.assert_close(ranks[0]["state"][name], want.detach(), rtol=1e-5, atol=1e-6, msg=name)
    assert any(not torch.equal(ranks[0]["state"][n], p) for n, p in build_actor(tiny_model_dir).model.named_parameters())
