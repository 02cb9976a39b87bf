"""Whole replicas (fsdp_size=1): gradients averaged over gloo ranks, also while the last backward runs; an actor
and a critic trained on 2 ranks that way hold plain tensors, the same weights on both ranks, and the weights one
process gets from the whole batch."""

from __future__ import annotations

import pytest
import torch

from hybridrl.distributed.local_launcher import LocalWorkerGroup
from tests.distributed.toy_workers import GradientAveragingRank, OverlappedAveragingRank
from tests.workers.helpers import build_actor, build_critic, ragged_batch

REPLICAS = ["actor_rollout_ref.actor.fsdp_config.fsdp_size=1", "critic.model.fsdp_config.fsdp_size=1"]


@pytest.mark.parametrize("bucket_bytes", [1, 64, 1 << 20])  # a bucket per gradient, a few, one per dtype
def test_gradients_become_the_mean_over_ranks_in_any_bucketing(bucket_bytes):
    with LocalWorkerGroup(GradientAveragingRank, {}, world_size=2, role="replicas") as group:
        per_rank = group.call_all("average", bucket_bytes)
    want = {"a": 1.5, "b": (11 + 0) / 2, "c": 21.5, "d": 31.5}  # rank r adds r+1; rank 1 has no grad for b
    for grads in per_rank:
        for name, value in want.items():
            assert torch.equal(grads[name], torch.full_like(grads[name], value)), name
    assert per_rank[0]["c"].dtype == torch.float64


def test_buckets_reduce_while_the_last_backward_runs_and_reach_the_same_means():
    with LocalWorkerGroup(OverlappedAveragingRank, {}, world_size=2, role="replicas") as group:
        ranks = group.call_all("average", 1)  # one bucket per parameter
    # a and b (4 parameters, finished by backward) launch from the hooks; side's 2 wait for finish()
    assert [rank["launched_in_backward"] for rank in ranks] == [4, 4]
    for name in ranks[0]["own"]:
        want = (ranks[0]["own"][name] + ranks[1]["own"][name]) / 2
        if name.endswith("weight"):  # the ranks' data differ (side.bias's gradient is 5 on both)
            assert not torch.equal(ranks[0]["own"][name], ranks[1]["own"][name]), name
        for rank in ranks:
            torch.testing.assert_close(rank["mean"][name], want, rtol=1e-6, atol=1e-7, msg=name)


class ReplicaRank:
    """An actor and a critic kept whole on each rank (fsdp_size=1), on `device`."""

    def __init__(self, model_dir: str, device: str = "cpu", extra: list[str] = ()) -> None:
        torch.set_num_threads(1)
        world, flags = torch.distributed.get_world_size(), [*REPLICAS, *extra]
        self.roles = {"actor": build_actor(model_dir, flags, world, device),
                      "critic": build_critic(model_dir, flags, world, device)}

    def update(self, batch) -> dict:
        return {**self.roles["actor"].update_actor(batch), **self.roles["critic"].update_critic(batch)}

    def weights(self) -> dict:
        return {role: {"plain": all(type(p) is torch.nn.Parameter for p in worker.model.parameters()),
                       "replicas": worker.parallel.name == "replicas",
                       "state": {k: v.detach().cpu().clone() for k, v in worker.model.named_parameters()}}
                for role, worker in self.roles.items()}


def assert_replicas_train_as_one_process(model_dir: str, device: str = "cpu", extra: list[str] = (),
                                         rtol: float = 1e-5, atol: float = 1e-6) -> None:
    batch = ragged_batch(num_rows=8, seed=5)
    flags = [*REPLICAS, *extra]
    one = {"actor": build_actor(model_dir, flags, device=device), "critic": build_critic(model_dir, flags, device=device)}
    initial = {role: {k: v.detach().cpu().clone() for k, v in w.model.named_parameters()} for role, w in one.items()}
    assert all(worker.parallel.name == "single device" for worker in one.values())  # one process: nothing to replicate
    for _ in range(2):
        one["actor"].update_actor(batch)
        one["critic"].update_critic(batch)
    with LocalWorkerGroup(ReplicaRank, {"model_dir": model_dir, "device": device, "extra": list(extra)},
                          world_size=2, role="replicas") as group:
        for _ in range(2):
            group.call_sharded_metrics("update", batch)
        ranks = group.call_all("weights")
    for role, worker in one.items():
        first, second = ranks[0][role], ranks[1][role]
        assert first["plain"] and first["replicas"] and second["plain"]  # no FSDP, no DTensors
        assert any(not torch.equal(first["state"][n], t) for n, t in initial[role].items()), role  # it trained
        for name, want in worker.model.named_parameters():
            assert torch.equal(first["state"][name], second["state"][name]), (role, name)  # copies never drift
            torch.testing.assert_close(first["state"][name], want.detach().cpu(), rtol=rtol, atol=atol,
                                       msg=(role, name))


def test_replica_roles_stay_equal_and_train_as_one_process_on_the_whole_batch(tiny_model_dir):
    assert_replicas_train_as_one_process(tiny_model_dir)


@pytest.mark.gpu
def test_gpu_replica_roles_reduce_from_cuda_backward_hooks(tiny_model_dir):
    """Both gloo ranks on one GPU (gloo all-reduces CUDA tensors through the host): the buckets launch from
    gradient hooks on CUDA's autograd thread, through checkpointed and compiled layers, in bf16 autocast."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    checkpointing = ["actor_rollout_ref.model.enable_gradient_checkpointing=true",
                     "critic.model.enable_gradient_checkpointing=true"]
    assert_replicas_train_as_one_process(tiny_model_dir, "cuda", checkpointing, rtol=1e-3, atol=1e-5)
