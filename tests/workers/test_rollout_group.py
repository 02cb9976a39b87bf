"""GroupRollout's sharding of prompts: whole prompts per replica when they divide, repeated rows otherwise;
either way one process's rows, in one process's order, with one process's sample keys. Also borrowed replica
groups (elastic rollout): each generates its slice, a failed one is returned and its slice redone."""

from __future__ import annotations

import torch

from hybridrl.distributed.worker_group import RankCalls
from hybridrl.rollout.base import SamplingParams
from hybridrl.workers.rollout_group import GroupRollout
from hybridrl.utils.batch import Batch
from hybridrl.workers.colocated import ROLLOUT_METRICS_META, ROW_INDEX_KEY


class KeyedSampler:
    """Stands in for a rank's rollout: each prompt row sampled n times, each sample keyed by its global row
    (the first sample's index + its place), as the hybrid engine keys its noise."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.received = 0

    def generate_sequences(self, prompts: Batch, params: SamplingParams) -> Batch:
        offset = int(prompts.pop(ROW_INDEX_KEY)[0])
        self.received += len(prompts)
        out = prompts.repeat(params.n, interleave=True)
        out["sample_key"] = offset + torch.arange(len(out))
        out.meta[f"{ROLLOUT_METRICS_META}{self.rank}"] = {"rollout/rows": float(len(out))}
        return out


class InProcessRanks(RankCalls):
    """A launcher whose ranks are objects in this process: the group calls without processes."""

    def __init__(self, world_size: int) -> None:
        self.role, self.world_size = "rollout", world_size
        self.ranks = [KeyedSampler(rank) for rank in range(world_size)]

    def _run(self, method, calls):
        return [getattr(rank, method)(*args, **kwargs) for rank, (args, kwargs) in zip(self.ranks, calls)]


def prompts(count: int) -> Batch:
    return Batch(tensors={"input_ids": torch.arange(count)[:, None].repeat(1, 3)},
                 non_tensors={"uid": [f"p{i}" for i in range(count)]})


def test_replicas_sample_what_one_process_would_whether_or_not_the_prompts_divide():
    params = SamplingParams(n=4, max_new_tokens=8)
    # (ranks, rows each rank receives, rows each returns): 6 prompts divide over 2 and 3 ranks (whole prompts,
    # sampled there); over 4 and 5 the 24 repeated rows are split (5: padded to 25, the copy dropped after)
    for world_size, received, returned in ((2, 3, 12), (3, 2, 8), (4, 6, 6), (5, 5, 5)):
        group = InProcessRanks(world_size)
        batch, metrics = GroupRollout(group, group, handoff=None).generate_sequences(prompts(6), params)
        assert batch["sample_key"].tolist() == list(range(24)), world_size  # one process's keys, in its order
        assert batch["input_ids"][:, 0].tolist() == [p for p in range(6) for _ in range(4)]
        assert list(batch["uid"]) == [f"p{p}" for p in range(6) for _ in range(4)]
        assert [rank.received for rank in group.ranks] == [received] * world_size
        assert ROW_INDEX_KEY not in batch and metrics["rollout/rows"] == returned
