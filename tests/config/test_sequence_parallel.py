"""config.sequence_parallel: each role's Ulysses size, its ranks and its data-parallel size (ranks / sp)."""

from __future__ import annotations

import pytest

from hybridrl.config import load_config
from hybridrl.config.sequence_parallel import (SP_KEYS, DataParallel, data_parallel, data_parallel_size, role_ranks,
                                               sequence_parallel_size)

ACTOR_SP = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
REF_SP = "actor_rollout_ref.ref.ulysses_sequence_parallel_size"
CRITIC_SP = "critic.ulysses_sequence_parallel_size"


def test_sizes_per_role_and_the_reference_follows_the_actor():
    cfg = load_config([f"{ACTOR_SP}=4", f"{CRITIC_SP}=2"])
    assert [sequence_parallel_size(cfg, role) for role in ("actor", "ref", "critic")] == [4, 4, 2]
    assert [data_parallel_size(cfg, role, 8) for role in ("actor", "ref", "critic")] == [2, 2, 4]
    assert data_parallel_size(load_config(), "actor", 8) == 8  # no SP: every rank its own rows
    with pytest.raises(ValueError, match="no sequence-parallel size for role 'reward_model'"):
        sequence_parallel_size(cfg, "reward_model")


def test_fsdp_config_spelling_is_the_same_size():
    cfg = load_config(["actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2",
                       "critic.model.fsdp_config.ulysses_sequence_parallel_size=4"])  # fmt: skip
    assert [sequence_parallel_size(cfg, role) for role in ("actor", "ref", "critic")] == [2, 2, 4]


def test_role_ranks_are_the_roles_own_list_else_the_actors():
    cfg = load_config(["critic.device_ids=[4,5]"])
    assert (role_ranks(cfg, "actor", 4), role_ranks(cfg, "ref", 4), role_ranks(cfg, "critic", 4)) == (4, 4, 2)
    assert role_ranks(load_config(["actor_rollout_ref.ref.device_ids=[2]"]), "ref", 2) == 1


def test_data_parallel_names_its_arithmetic_only_with_sequence_parallelism():
    plain = DataParallel(4)
    assert (plain.size, plain.divisor(), plain.split_over()) == (4, "the number of devices (4)", "4 devices")
    split = data_parallel(load_config([f"{CRITIC_SP}=2"]), "critic", 4)
    assert split == DataParallel(4, 2, SP_KEYS["critic"])
    assert split.divisor() == f"the data-parallel size 2 (4 ranks / {CRITIC_SP} 2)" == split.split_over()
    assert DataParallel(1, 2, ACTOR_SP).size == 1  # never 0 shards (the rules report the one rank)
