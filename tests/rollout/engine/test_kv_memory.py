"""The KV cache a generation gets: the start-up plan, or what fits beside generation's activations now."""

from __future__ import annotations

import pytest

from hybridrl.rollout.engine.kv_memory import GIB, MARGIN_BYTES, blocks_for_generation

BLOCK = 1 << 20  # 1 MiB blocks


def test_the_plan_stands_while_memory_allows():
    size = blocks_for_generation(100, free_bytes=100 * BLOCK + 3 * GIB + MARGIN_BYTES, activation_bytes=3 * GIB,
                                 block_bytes=BLOCK, gpu_memory_utilization=0.9)
    assert (size.blocks, size.warning) == (100, None)


def test_less_free_memory_shrinks_the_cache_and_says_what_to_change():
    # 2 GiB of activations and the margin leave 60 blocks of the 100 planned
    size = blocks_for_generation(100, free_bytes=60 * BLOCK + 2 * GIB + MARGIN_BYTES, activation_bytes=2 * GIB,
                                 block_bytes=BLOCK, gpu_memory_utilization=0.9)
    assert size.blocks == 60
    for phrase in ("instead of the 100 planned", "preempt", "gpu_memory_utilization (now 0.9)",
                   "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"):
        assert phrase in size.warning


def test_no_room_for_one_block_is_an_error_naming_the_keys():
    with pytest.raises(RuntimeError, match="no memory left for the rollout's KV cache.*gpu_memory_utilization"):
        blocks_for_generation(100, free_bytes=2 * GIB, activation_bytes=2 * GIB, block_bytes=BLOCK,
                              gpu_memory_utilization=0.5)
