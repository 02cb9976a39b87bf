"""parallelize: one strategy per layout (one device, whole replicas, FSDP2), chosen from the group and fsdp_size."""

from __future__ import annotations

from hybridrl.distributed import LocalWorkerGroup
from tests.workers.helpers import build_actor
from tests.workers.rank_actor import ParallelProbe


def test_one_process_keeps_the_plain_model_on_its_device(tiny_model_dir):
    actor = build_actor(tiny_model_dir)
    assert (actor.parallel.name, actor.parallel.single_device) == ("single device", True)
    assert actor.parallel.max_over_ranks(5) == 5  # no other rank to agree with
    assert list(actor.parallel.weight_units()) == [[name for name, _ in actor.model.named_parameters()]]


def test_two_ranks_shard_unless_each_holds_a_whole_copy(tiny_model_dir):
    with LocalWorkerGroup(ParallelProbe, {}, world_size=2, role="probe") as group:
        ranks = group.call_all("strategies", tiny_model_dir)
    for rank in ranks:
        assert rank[-1] == {"name": "FSDP2", "single_device": False, "plain": False, "agreed": 4}  # max of 3, 4
        assert rank[2] == rank[-1]  # fsdp_size = the group: the same layout
        assert rank[1] == {"name": "replicas", "single_device": False, "plain": True, "agreed": ranks.index(rank) + 3}
