"""Scheduler + BlockManager driven by a fake model that checks what the KV cache would hold."""

import pytest

from hybridrl.rollout.engine.block_manager import BlockManager
from hybridrl.rollout.engine.scheduler import Scheduler, prefill_tokens
from hybridrl.rollout.engine.sequence import Sequence


def fake_token(seq, token_ids=None):
    """Deterministic in (row, context): any divergence in recompute shows up in the tokens."""
    token_ids = seq.token_ids if token_ids is None else token_ids
    return (seq.row * 31 + sum(token_ids) * 7 + len(token_ids)) % 50 + 10


JUNK = -7  # what a burst "samples" for a row past its budget: the scheduler must drop it


def fake_burst(seq, num_steps, kv, block_size, ids=None, budget=None):
    """Decode `num_steps` tokens for `seq` as the device would: each step writes the KV of its input
    token into a reserved slot, until the row's budget is spent (then junk, no writes). `ids`: the row's
    tokens as the device holds them (a queued burst continues from the previous burst's tokens, which the
    host has not seen yet); `budget`: steps that write (default: the host's remaining budget).
    Returns the tokens and the device's tokens after the burst."""
    ids, tokens = list(seq.token_ids if ids is None else ids), []
    budget = seq.num_remaining_tokens if budget is None else budget
    for _ in range(num_steps):
        if len(tokens) >= budget:
            tokens.append(JUNK)
            continue
        pos = len(ids) - 1
        assert pos // block_size < len(seq.block_table), "a burst step has no reserved KV block"
        kv[seq.block_table[pos // block_size] * block_size + pos % block_size] = tuple(ids)
        tokens.append(fake_token(seq, ids))
        ids.append(tokens[-1])
    return tokens, ids


def check_kv(batch, is_prefill, kv, block_size):
    """Every cached position of the scheduled sequences holds its own prefix's KV (prefill writes first)."""
    for seq in batch:
        first = seq.num_tokens - prefill_tokens(seq) if is_prefill else seq.num_tokens - 1
        for pos in range(seq.num_tokens):
            slot = seq.block_table[pos // block_size] * block_size + pos % block_size
            if pos >= first and pos >= seq.num_cached_tokens:
                kv[slot] = tuple(seq.token_ids[:pos + 1])
            assert kv.get(slot) == tuple(seq.token_ids[:pos + 1]), "stale or missing KV"


def queued_bursts(sched, batch, num_steps, tokens, device_ids, burst, kv, block_size):
    """The bursts the engine queues behind one in flight (`continue_burst`), run as the device would: before
    the host has seen the previous burst's tokens. Books each burst before it; yields the queued tokens."""
    while True:
        length, limits = sched.continue_burst(batch, num_steps, burst)
        if not length:
            return
        assert len(limits) == len(batch) and 1 <= length <= burst
        out = []
        for i, (seq, limit) in enumerate(zip(batch, limits)):
            budget = max(0, limit - (len(device_ids[i]) - 1))  # 0 for rows already finished
            row, device_ids[i] = fake_burst(seq, length, kv, block_size, ids=device_ids[i], budget=budget)
            out.append(row)
        sched.postprocess(batch, tokens, [[0.0] * num_steps for _ in batch])  # the burst before, read now
        yield out
        num_steps, tokens = length, out


def simulate(prompts, n=1, max_new=12, num_blocks=64, block_size=4, max_num_seqs=8, max_tokens=32,
             stop=frozenset(), burst=1, queue=False):
    """`queue`: the engine's overlap of bursts (`continue_burst`) as well."""
    bm = BlockManager(num_blocks, block_size)
    sched = Scheduler(bm, max_num_seqs, max_tokens)
    seqs = [Sequence(i * n + j, p, max_new, seed=0, stop_ids=stop) for i, p in enumerate(prompts) for j in range(n)]
    for seq in seqs:
        sched.add(seq)
    kv = {}  # slot -> token prefix whose last token's KV it holds
    steps = queued = 0
    while not sched.is_finished():
        batch, is_prefill, num_steps = sched.schedule(burst)
        assert batch and len(batch) <= max_num_seqs and 1 <= num_steps <= burst
        if is_prefill:
            assert len(batch) == 1 or sum(prefill_tokens(s) for s in batch) <= max_tokens
        check_kv(batch, is_prefill, kv, block_size)
        runs = [([fake_token(s)], None) if is_prefill else fake_burst(s, num_steps, kv, block_size) for s in batch]
        tokens = [run[0] for run in runs]
        if queue and not is_prefill:
            device_ids = [run[1] for run in runs]
            for tokens in queued_bursts(sched, batch, num_steps, tokens, device_ids, burst, kv, block_size):
                queued += 1
                num_steps = len(tokens[0])
        sched.postprocess(batch, tokens, [[0.0] * num_steps for _ in batch])
        steps += 1
        assert steps < 10_000
    assert bm.num_free_blocks == num_blocks and all(b.ref_count == 0 for b in bm.blocks.values())
    sched.num_queued_bursts = queued
    return [s.completion_token_ids for s in seqs], sched


@pytest.mark.parametrize("queue", [False, True])
@pytest.mark.parametrize("n", [1, 3])
def test_decode_bursts_give_the_same_tokens_as_single_steps(n, queue):
    prompts = [list(range(1, 10)), list(range(5, 8)), list(range(2, 20)), [3] * 5]
    single, _ = simulate(prompts, n=n, max_num_seqs=4)
    for burst in (2, 5, 16):
        out, sched = simulate(prompts, n=n, max_num_seqs=4, burst=burst, queue=queue)
        assert out == single and JUNK not in sum(out, [])
        assert (sched.num_queued_bursts > 0) == (queue and burst < 12)  # 12 tokens: one burst of 16 does it all
    # tight blocks: bursts fall back to single steps (which may preempt) and still agree
    tight, sched = simulate(prompts, n=n, num_blocks=12, max_num_seqs=4, burst=8, queue=queue)
    assert tight == single


@pytest.mark.parametrize("queue", [False, True])
def test_bursts_stop_at_stop_tokens_and_free_reserved_blocks(queue):
    """Queued: a row whose stop token a burst samples decodes the burst queued behind it as junk (its KV
    lands in blocks it frees); no other row reads that KV, and every block comes back."""
    prompts = [[i + 1] * (3 + i) for i in range(6)]
    stop = frozenset({10, 11, 12})
    single, _ = simulate(prompts, max_num_seqs=6, stop=stop)
    burst, sched = simulate(prompts, max_num_seqs=6, stop=stop, burst=3, queue=queue)  # asserts blocks freed
    assert burst == single and any(len(o) < 12 for o in burst)
    assert (sched.num_queued_bursts > 0) == queue


def test_no_burst_is_queued_while_sequences_wait_or_a_budget_ends_inside_the_burst():
    bm = BlockManager(64, 4)
    sched = Scheduler(bm, max_num_seqs=1, max_num_batched_tokens=32)
    first, second = Sequence(0, [1, 2, 3], 10, seed=0), Sequence(1, [4, 5], 10, seed=0)
    sched.add(first)
    sched.add(second)
    batch, _, _ = sched.schedule(4)  # prefill of `first` (max_num_seqs=1: `second` waits)
    sched.postprocess(batch, [[9]], [[0.0]])
    batch, is_prefill, steps = sched.schedule(4)
    assert not is_prefill and sched.waiting and sched.continue_burst(batch, steps, 4) == (0, [])
    sched.waiting.clear()
    assert sched.continue_burst(batch, 9, 4) == (0, [])  # 9 steps spend the remaining budget of 9
    length, limits = sched.continue_burst(batch, steps, 4)
    assert length == 4 and limits == [len(first) - 1 + steps + 4]


@pytest.mark.parametrize("n", [1, 3])
def test_preemption_resumes_exactly(n):
    prompts = [list(range(1, 10)), list(range(5, 8)), list(range(2, 20))]
    free_run, sched = simulate(prompts, n=n)
    assert sched.num_preempted == 0
    tight_run, tight = simulate(prompts, n=n, num_blocks=9)
    assert tight.num_preempted > 0
    assert tight_run == free_run


def test_budgets_respected_and_stop_tokens_end_sequences():
    prompts = [[i + 1] * (3 + i) for i in range(12)]
    outs, _ = simulate(prompts, max_num_seqs=3, max_tokens=10, stop=frozenset({10, 11, 12}))
    for out in outs:
        assert len(out) <= 12
        assert all(t not in {10, 11, 12} for t in out[:-1])


def test_long_prompt_runs_alone_over_the_token_budget():
    outs, _ = simulate([list(range(40)), [1, 2]], max_tokens=16, num_blocks=32)
    assert [len(o) for o in outs] == [12, 12]


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
    assert fast.output_logprobs == slow.output_logprobs == [-0.5] * len(want_tokens)
