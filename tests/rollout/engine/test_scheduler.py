"""Scheduler units: burst booking and token appends (the whole step loop runs in test_core.py)."""

import pytest

from hybridrl.rollout.engine.block_manager import BlockManager
from hybridrl.rollout.engine.scheduler import Scheduler
from hybridrl.rollout.engine.sequence import Sequence


def admitted(sched, *prompts, max_new=10):
    for i, prompt in enumerate(prompts):
        sched.add(Sequence(i, prompt, max_new, seed=0))
    return sched.admit()


def test_a_burst_reserves_past_the_tokens_in_flight():
    """A row 3 tokens ahead of the host (a burst in flight) and one a prefill's token ahead: blocks for the
    unseen tokens and the burst, limits past both, the burst as long as the longest remaining budget."""
    bm = BlockManager(64, 4)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=32)
    first, second = admitted(sched, [1, 2, 3], [4, 5])
    first.append_tokens([9], [0.0])  # read: 9 left
    length, limits = sched.plan_burst([first, second], [3, 1], max_steps=16)
    assert length == 9 and limits == [len(first) - 1 + 3 + 6, len(second) - 1 + 1 + 9]
    assert len(first.block_table) * 4 >= limits[0] and len(second.block_table) * 4 >= limits[1]


def test_a_burst_is_as_short_as_the_shortest_budget_while_sequences_wait():
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=1, max_num_batched_tokens=32)
    first, = admitted(sched, [1, 2, 3], [4, 5])  # max_num_seqs=1: the second waits
    assert sched.waiting and sched.plan_burst([first], [4], max_steps=16) == (6, [len(first) - 1 + 10])


def test_no_burst_and_no_reservation_when_blocks_are_short():
    bm = BlockManager(3, 4)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=32)
    first, second = admitted(sched, [1, 2, 3], [4, 5])
    free = bm.num_free_blocks
    assert sched.plan_burst([first, second], [0, 0], max_steps=8) == (0, []) and bm.num_free_blocks == free


def test_control_plane_does_not_import_torch():
    import ast
    from pathlib import Path

    import hybridrl.rollout.engine as engine

    root = Path(engine.__file__).parent
    for name in ("sequence.py", "block_manager.py", "scheduler.py"):
        tree = ast.parse((root / name).read_text())
        modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not any(m.split(".")[0] in {"torch", "numpy"} for m in modules), name


@pytest.mark.parametrize("burst,stop,want_tokens,finished", [
    ([5, 6, 7], frozenset({9}), [5, 6, 7], False),      # no stop, within budget: one extend
    ([5, 9, 7], frozenset({9}), [5, 9], True),          # stop mid-burst: tokens after it are dropped
    ([5, 6, 7, 8], frozenset(), [5, 6, 7, 8], True),    # exactly the remaining budget
    ([5, 6, 7, 8, 1, 2], frozenset(), [5, 6, 7, 8], True),  # past the budget: the excess is dropped
])
def test_append_tokens_matches_token_by_token(burst, stop, want_tokens, finished):
    fast, slow = (Sequence(0, [1, 2], 4, seed=0, stop_ids=stop) for _ in range(2))
    assert fast.append_tokens(burst, [-0.5] * len(burst)) is finished
    assert any(slow.append_token(t, -0.5) for t in burst) is finished
    assert fast.completion_token_ids == slow.completion_token_ids == want_tokens
    assert fast.output_logprobs.tolist() == slow.output_logprobs.tolist() == [-0.5] * len(want_tokens)
