"""Token-budget micro-batches (use_dynamic_bsz): every row once, the budget kept, outputs back in order."""

from __future__ import annotations

import logging
import random

import pytest
import torch

from hybridrl.utils.batch import Batch
from hybridrl.workers.micro_batches import MicroBatchPlan, min_num_parts, partition_by_tokens


def loads(parts, lengths):
    return [sum(lengths[i] for i in part) for part in parts]


@pytest.mark.parametrize("seed", range(20))
def test_every_row_once_and_budget_kept_except_single_oversize_rows(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(0, 60) for _ in range(rng.randint(1, 40))]
    budget = rng.randint(20, 120)
    parts = partition_by_tokens(lengths, budget)
    assert sorted(i for part in parts for i in part) == list(range(len(lengths)))
    assert all(load <= budget or len(part) == 1 for part, load in zip(parts, loads(parts, lengths)))
    assert len(parts) == min_num_parts(lengths, budget)
    oversize = [n for n in lengths if n > budget]
    fitting = sum(lengths) - sum(oversize)
    assert len(parts) >= len(oversize) + -(-fitting // budget)  # never fewer than the tokens allow


def test_balanced_and_similar_lengths_grouped():
    assert sorted(map(len, partition_by_tokens([10] * 8, 25))) == [2, 2, 2, 2]
    lengths = [50, 5, 48, 6, 47, 7, 49, 4]
    parts = partition_by_tokens(lengths, 110)
    # contiguous runs of the rows sorted longest first (similar lengths together) ...
    assert [[lengths[i] for i in part] for part in parts] == [[50], [49, 48], [47, 7, 6, 5, 4]]
    # ... as light as 3 such runs allow (filling each up to the budget would give 99, 102, 15)
    assert max(loads(parts, lengths)) == 97


def test_requested_number_of_parts_for_agreeing_ranks():
    lengths = [30, 30, 30, 30, 5, 5]
    parts = partition_by_tokens(lengths, 1000, num_parts=4)
    assert len(parts) == 4 and all(parts)
    with pytest.raises(ValueError, match="cannot make 7 non-empty micro-batches of 6 rows"):
        partition_by_tokens(lengths, 1000, num_parts=7)


def test_oversize_row_gets_its_own_part_and_a_warning_naming_the_key(caplog):
    lengths = [5, 500, 6, 7]
    parts = partition_by_tokens(lengths, 20)
    assert [1] in parts and all(load <= 20 for part, load in zip(parts, loads(parts, lengths)) if part != [1])
    mask = torch.zeros(4, 600, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    plan = MicroBatchPlan(rows=2, max_tokens=20, budget_key="actor_rollout_ref.actor.ppo_max_token_len_per_gpu")
    with caplog.at_level(logging.WARNING):
        plan.split(Batch({"attention_mask": mask}))
    assert "raise actor_rollout_ref.actor.ppo_max_token_len_per_gpu to at least 500" in caplog.text


def test_outputs_restored_to_row_order():
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 30, (13,), generator=gen)
    mask = (torch.arange(30)[None, :] < lengths[:, None]).long()
    batch = Batch({"attention_mask": mask, "row": torch.arange(13)})
    micro = MicroBatchPlan(rows=2, max_tokens=40).split(batch)
    assert len(micro.parts) > 1 and micro.order is not None
    assert not torch.equal(torch.cat([p["row"] for p in micro.parts]), torch.arange(13))  # really reordered
    assert torch.equal(micro.restore(torch.cat([p["row"] for p in micro.parts])), torch.arange(13))
    fixed = MicroBatchPlan(rows=5).split(batch)
    assert [len(p) for p in fixed.parts] == [5, 5, 3] and fixed.order is None


def test_token_budget_is_per_rank_of_a_sequence_parallel_group():
    from hybridrl.config import load_config

    cfg = load_config(["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=100",
                       "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=50", "critic.ppo_max_token_len_per_gpu=30",
                       "critic.use_dynamic_bsz=true", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
                       "actor_rollout_ref.ref.ulysses_sequence_parallel_size=4", "critic.ulysses_sequence_parallel_size=3"])
    budgets = {phase: MicroBatchPlan.for_phase(cfg, phase, rows=2).max_tokens
               for phase in ("update_actor", "old_log_prob", "ref", "values", "update_critic")}
    # actor 100 x 2; old log-probs follow the actor's budget (100) x 2; ref 50 x 4; critic 30 x 3 (values: 30 too)
    assert budgets == {"update_actor": 200, "old_log_prob": 200, "ref": 200, "values": 90, "update_critic": 90}
    plain = load_config(["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=100"])
    assert MicroBatchPlan.for_phase(plain, "update_actor", rows=2).max_tokens == 100


def test_oversize_warning_under_sequence_parallelism_names_the_per_rank_value(caplog, monkeypatch):
    from hybridrl.workers import micro_batches

    monkeypatch.setattr(micro_batches, "_warned_keys", set())
    key, sp_key = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
    plan = MicroBatchPlan(rows=2, max_tokens=40, budget_key=key, sp=2, sp_key=sp_key)
    mask = torch.zeros(2, 100, dtype=torch.long)
    mask[0, :5], mask[1, :99] = 1, 1
    with caplog.at_level(logging.WARNING):
        plan.split(Batch({"attention_mask": mask}))
    assert f"a row holds 99 tokens, over 40 tokens ({key}=20 x {sp_key} 2)" in caplog.text
    assert f"raise {key} to at least 50" in caplog.text  # 99 tokens over 2 ranks: 50 each
