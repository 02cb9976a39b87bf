"""utils/gc_time.py: the clock counts the collector's time, and frozen start-up objects leave full collections."""

from __future__ import annotations

import gc

from hybridrl.utils.gc_time import WARM_UP_POPS, GCClock, gc_clock, startup_objects_frozen


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
