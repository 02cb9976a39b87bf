"""utils/gc_time.py: the clock counts the collector's time, and frozen start-up objects leave full collections."""

from __future__ import annotations

import gc

from hybridrl.utils.gc_time import (FULL_COLLECTION_EVERY, WARM_UP_POPS, GCClock, freeze_startup_objects, gc_clock,
                                    startup_objects_frozen)


def test_the_clock_counts_collections_and_pop_resets_it():
    clock = GCClock()
    clock.pops = WARM_UP_POPS  # past the warm-up: popping freezes nothing
    try:
        gc.collect()
        assert clock.seconds > 0
        assert clock.end_step() > 0 and clock.seconds == 0.0
        assert gc.get_freeze_count() == 0
    finally:
        gc.callbacks.remove(clock._on_collection)


def test_the_first_pops_freeze_what_the_warm_up_built():
    clock = GCClock()
    try:
        compiled_graphs = [[i] for i in range(1000)]  # objects a first step builds to keep
        clock.end_step()
        assert gc.get_freeze_count() >= len(compiled_graphs)
        for _ in range(WARM_UP_POPS):
            clock.end_step()
        assert clock.pops == WARM_UP_POPS + 1
    finally:
        gc.callbacks.remove(clock._on_collection)
        gc.unfreeze()


def test_objects_alive_at_start_up_are_frozen_for_the_block_only():
    start_up = [[i] for i in range(1000)]  # tracked container objects
    assert gc.get_freeze_count() == 0
    with startup_objects_frozen():
        assert gc.get_freeze_count() >= len(start_up)
        garbage = [[]]
        garbage.append(garbage)  # a cycle made during training is still collected
        del garbage
        assert gc.collect() >= 2
    assert gc.get_freeze_count() == 0  # unfrozen: what the run leaves behind can be collected again


def test_one_clock_per_process():
    assert gc_clock() is gc_clock()


def full_collections_while_keeping(num_lists: int) -> int:
    """Full collections Python runs while `num_lists` new lists are made and kept (parked requests' token lists)."""
    full = []

    def count(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    gc.callbacks.append(count)
    try:
        kept = [[i] for i in range(num_lists)]
    finally:
        gc.callbacks.remove(count)
    del kept
    return len(full)


def test_training_runs_full_collections_a_tenth_as_often_and_restores_the_thresholds():
    before = gc.get_threshold()
    gc.freeze()  # as in training, so the oldest generation starts small (a test session holds ~1M objects)
    try:
        default = full_collections_while_keeping(1_000_000)
    finally:
        gc.unfreeze()
    with startup_objects_frozen():
        assert gc.get_threshold() == (before[0], before[1], FULL_COLLECTION_EVERY)
        training = full_collections_while_keeping(1_000_000)
    assert gc.get_threshold() == before
    assert default >= 5 and training <= default // 5


def test_a_rank_keeps_rarer_full_collections_and_a_users_rarer_setting():
    before = gc.get_threshold()
    try:
        freeze_startup_objects()
        assert gc.get_threshold()[2] == FULL_COLLECTION_EVERY
        gc.set_threshold(before[0], before[1], 10 * FULL_COLLECTION_EVERY)
        with startup_objects_frozen():
            assert gc.get_threshold()[2] == 10 * FULL_COLLECTION_EVERY
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
