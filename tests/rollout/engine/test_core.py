"""EngineCore (scheduler, block manager, the steps it queues) driven by a fake device that checks what the KV
cache holds: each launch computes at once, in launch order (the device's stream order), from what the device
holds, never from the host's view of a row the host has not read yet."""

from types import SimpleNamespace

import pytest
import torch

from hybridrl.rollout.engine.block_manager import BlockManager
from hybridrl.rollout.engine.core import EngineCore
from hybridrl.rollout.engine.decode_step import LaunchedStep
from hybridrl.rollout.engine.scheduler import prefill_tokens
from hybridrl.rollout.engine.sequence import Sequence

JUNK = -7  # what a burst "samples" for a row past its limit: the host must drop it


def fake_token(seq, token_ids):
    """Deterministic in (row, context): any divergence in recompute shows up in the tokens."""
    return (seq.row * 31 + sum(token_ids) * 7 + len(token_ids)) % 50 + 10


class FakeDevice:
    """`ModelRunner`'s launch API over a dict KV cache (slot -> the token prefix whose last KV it holds)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.kv: dict[int, tuple[int, ...]] = {}
        self.ids: dict[int, list[int]] = {}  # id(seq) -> its tokens as the device holds them (junk included)
        self.prefill_graphs = SimpleNamespace(num_runs=0)
        self.graphs_capture_time_s = 0.0

    def _slot(self, seq, pos):
        assert pos // self.block_size < len(seq.block_table), "a step has no KV block for its token"
        return seq.block_table[pos // self.block_size] * self.block_size + pos % self.block_size

    def _attend(self, seq, ids):
        """Write the KV of the newest token and read every earlier one: stale or missing KV fails here."""
        for pos in range(len(ids) - 1):
            assert self.kv.get(self._slot(seq, pos)) == tuple(ids[:pos + 1]), "stale or missing KV"
        return fake_token(seq, ids)

    def launch_prefill(self, seqs):
        tokens = []
        for seq in seqs:
            ids = list(seq.token_ids)
            for pos in range(seq.num_tokens - prefill_tokens(seq), seq.num_tokens):
                if pos >= seq.num_cached_tokens:
                    self.kv[self._slot(seq, pos)] = tuple(ids[:pos + 1])
            tokens.append(self._attend(seq, ids))
            self.ids[id(seq)] = ids + [tokens[-1]]
        return self._launched(seqs, [[t] for t in tokens])

    def launch_burst(self, seqs, num_steps, limits, ahead, sources):
        given = {into: int(step.last_tokens[row]) for step, rows, into_rows in sources
                 for row, into in zip(rows, into_rows)}
        assert sorted(given) == [i for i, unseen in enumerate(ahead) if unseen], "rows ahead need the device's token"
        out = []
        for i, (seq, limit) in enumerate(zip(seqs, limits)):
            ids = self.ids[id(seq)] if ahead[i] else list(seq.token_ids)
            assert len(ids) == len(seq) + ahead[i] and (not ahead[i] or ids[-1] == given[i])
            row = []
            for _ in range(num_steps):
                if len(ids) - 1 >= limit:  # past its reserved blocks: no KV write, junk
                    row.append(JUNK)
                    continue
                self.kv[self._slot(seq, len(ids) - 1)] = tuple(ids)
                row.append(self._attend(seq, ids))
                ids.append(row[-1])
            self.ids[id(seq)] = ids
            out.append(row)
        return self._launched(seqs, out)

    @staticmethod
    def _launched(seqs, tokens):
        host = torch.tensor(tokens, dtype=torch.int64)
        return LaunchedStep(seqs, host.shape[1], host[:, -1], host, torch.zeros(host.shape), None)


def make_core(num_blocks=64, block_size=4, max_num_seqs=8, max_tokens=32, burst=1, queue=True, caching=False):
    bm = BlockManager(num_blocks, block_size, caching)
    return EngineCore(FakeDevice(block_size), bm, max_num_seqs, max_tokens, burst, queue_bursts=queue)


def run(core, seqs, follow_up=None):
    """Step until done; `follow_up(seq)`: a sequence to add when `seq` finishes (an agent's next turn)."""
    for seq in seqs:
        core.add(seq)
    done, steps = [], 0
    while core.has_work:
        for seq in core.step():
            done.append(seq)
            nxt = follow_up(seq) if follow_up else None
            if nxt is not None:
                core.add(nxt)
        steps += 1
        assert steps < 10_000
    bm = core.block_manager
    if not bm.enable_prefix_caching:
        assert bm.num_free_blocks == bm.num_blocks and all(b.ref_count == 0 for b in bm.blocks.values())
    return done


def simulate(prompts, n=1, max_new=12, stop=frozenset(), **kwargs):
    core = make_core(**kwargs)
    seqs = [Sequence(i * n + j, p, max_new, seed=0, stop_ids=stop) for i, p in enumerate(prompts) for j in range(n)]
    run(core, seqs)
    return [s.completion_token_ids for s in seqs], core


PROMPTS = [list(range(1, 10)), list(range(5, 8)), list(range(2, 20)), [3] * 5]


@pytest.mark.parametrize("queue", [False, True])
@pytest.mark.parametrize("n", [1, 3])
def test_decode_bursts_give_the_same_tokens_as_single_steps(n, queue):
    single, _ = simulate(PROMPTS, n=n, max_num_seqs=4, queue=False)
    for burst in (1, 2, 5, 16):
        out, core = simulate(PROMPTS, n=n, max_num_seqs=4, burst=burst, queue=queue)
        assert out == single and JUNK not in sum(out, [])
        assert (core.stats.chained > 0) == (queue and burst < 11)  # 11 tokens after the prefill's: one burst of 16
    # tight blocks: bursts fall back to single steps (which may preempt) and still agree
    tight, core = simulate(PROMPTS, n=n, num_blocks=12, max_num_seqs=4, burst=8, queue=queue)
    assert tight == single and core.scheduler.num_preempted > 0


@pytest.mark.parametrize("queue", [False, True])
def test_bursts_stop_at_stop_tokens_and_free_reserved_blocks(queue):
    """Queued: a row whose stop token a burst samples decodes the burst queued behind it as junk (its KV
    lands in blocks it frees); no other row reads that KV, and every block comes back (`run` asserts it)."""
    prompts = [[i + 1] * (3 + i) for i in range(6)]
    stop = frozenset({10, 11, 12})
    single, _ = simulate(prompts, max_num_seqs=6, stop=stop, queue=False)
    burst, core = simulate(prompts, max_num_seqs=6, stop=stop, burst=3, queue=queue)
    assert burst == single and any(len(o) < 12 for o in burst)
    assert (core.stats.chained > 0) == queue


@pytest.mark.parametrize("n", [1, 3])
def test_preemption_resumes_exactly(n):
    free_run, core = simulate(PROMPTS[:3], n=n)
    assert core.scheduler.num_preempted == 0
    tight_run, tight = simulate(PROMPTS[:3], n=n, num_blocks=9)
    assert tight.scheduler.num_preempted > 0
    assert tight_run == free_run


def test_budgets_respected_and_stop_tokens_end_sequences():
    prompts = [[i + 1] * (3 + i) for i in range(12)]
    outs, _ = simulate(prompts, max_num_seqs=3, max_tokens=10, stop=frozenset({10, 11, 12}), burst=4)
    for out in outs:
        assert len(out) <= 12
        assert all(t not in {10, 11, 12} for t in out[:-1])


class CapturingDevice(FakeDevice):
    """Captures a graph (as the runner's cumulative clock shows) at its first prefill and at each burst."""

    def launch_prefill(self, seqs):
        self.graphs_capture_time_s += 0.0 if self.prefill_graphs.num_runs else 0.5
        self.prefill_graphs.num_runs += 1
        return super().launch_prefill(seqs)

    def launch_burst(self, seqs, num_steps, limits, ahead, sources):
        self.graphs_capture_time_s += 0.25
        return super().launch_burst(seqs, num_steps, limits, ahead, sources)


def test_graph_captures_inside_launches_are_reported_per_take():
    """rollout/graph_capture_s: the capture time of the launches since the last take (batch calls and the
    request API alike: asynchronous training reads it through the request API)."""
    core = EngineCore(CapturingDevice(4), BlockManager(64, 4, False), 8, 32, 4, queue_bursts=True)
    run(core, [Sequence(0, [1, 2, 3], 10, seed=0)])
    metrics = core.take_stats().metrics(64)
    bursts = metrics["rollout/decode_bursts"]
    assert bursts > 0 and metrics["rollout/graph_capture_s"] == 0.5 + 0.25 * bursts
    run(core, [Sequence(1, [4, 5], 3, seed=0)])
    again = core.take_stats().metrics(64)
    assert again["rollout/graph_capture_s"] == 0.25 * again["rollout/decode_bursts"]  # not the first take's again


def test_long_prompt_runs_alone_over_the_token_budget():
    outs, _ = simulate([list(range(40)), [1, 2]], max_tokens=16, num_blocks=32)
    assert [len(o) for o in outs] == [12, 12]


def agent_turns(queue, burst, num_blocks=256, max_num_seqs=8):
    """Conversations of up to 4 turns: a turn that stops gets an observation appended and continues as a new
    sequence extending it (the prefix cache holds the earlier turns). Queued, the next turn's prefill and the
    burst it joins go behind the burst in flight, whose rows may have stopped unseen."""
    core = make_core(num_blocks=num_blocks, max_num_seqs=max_num_seqs, burst=burst, queue=queue, caching=True)
    stop = frozenset({10, 11, 12, 13, 14})
    turns: dict[int, list[list[int]]] = {}

    def follow_up(seq):
        turns.setdefault(seq.row, []).append(seq.completion_token_ids)
        if seq.stop_reason != "stop" or len(turns[seq.row]) == 4:
            return None
        nxt = Sequence(seq.row, [*seq.token_ids, seq.row % 7 + 1, 2, 3], 9, seed=0, stop_ids=stop,
                       cache_on_finish=True, slot=100 + 4 * seq.row + len(turns[seq.row]))
        return nxt

    first = [Sequence(i, [i % 5 + 1] * (3 + i % 4), 9, seed=0, stop_ids=stop, cache_on_finish=True)
             for i in range(12)]
    run(core, first, follow_up)
    return turns, core


@pytest.mark.parametrize("burst", [1, 3, 8])
def test_agent_turns_joining_bursts_in_flight_give_the_unqueued_tokens(burst):
    want, _ = agent_turns(queue=False, burst=1)
    got, core = agent_turns(queue=True, burst=burst)
    assert got == want and sum(len(t) for t in got.values()) > len(got)  # several turns each
    assert core.stats.chained > 0 and core.scheduler.num_cached_tokens > 0
    tight, core = agent_turns(queue=True, burst=burst, num_blocks=24, max_num_seqs=4)
    assert tight == want


@pytest.mark.parametrize("burst", [1, 4])
def test_generated_tokens_count_the_kept_tokens_and_decode_rows_the_batch(burst):
    """rollout/num_generated_tokens: every token the sequences kept (a stop's junk tail dropped), so an aborted
    request's tokens count in the take that sampled them; rollout/mean_decode_rows: rows per decode step."""
    stop = frozenset({10, 11, 12})
    outs, core = simulate([[i + 1] * (3 + i) for i in range(6)], max_new=10, stop=stop, max_num_seqs=3, burst=burst)
    metrics = core.take_stats().metrics(64)
    assert metrics["rollout/num_generated_tokens"] == sum(map(len, outs)) > 0
    assert 1 <= metrics["rollout/mean_decode_rows"] <= 3
    row_steps = sum(len(o) - 1 for o in outs)  # every token after the prefill's was one row of one decode step
    assert metrics["rollout/mean_decode_rows"] * metrics["rollout/decode_steps"] >= row_steps
    assert core.take_stats().metrics(64)["rollout/num_generated_tokens"] == 0  # counted once


def test_generated_tokens_of_an_aborted_sequence_count_in_their_take():
    core = make_core(burst=2)
    seq = Sequence(0, [1, 2, 3], 20, seed=0)
    core.add(seq)
    for _ in range(4):
        core.step()
    core.drain()
    kept = seq.num_completion_tokens
    core.abort(seq)
    assert 0 < kept < 20 and core.take_stats().metrics(64)["rollout/num_generated_tokens"] == kept
