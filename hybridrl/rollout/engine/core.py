"""The engine's one step loop, under both the batch call and the request API.

`EngineCore.step()` runs one prefill step, or reads one decode burst, and returns the sequences that
finished in it; a prefill that admits every waiting sequence and finishes none goes on to launch and read the
next burst in the same step. Sequences may be added and aborted between steps: an added one waits, so no
burst is queued behind the one in flight (`Scheduler.continue_burst`), the next step prefills it and decodes
it with the running ones (continuous batching). The device state a step leaves queued (the burst behind the
one just read) is read by the next step, whichever caller makes it.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

from hybridrl.rollout.engine.block_manager import BlockManager
from hybridrl.rollout.engine.decode_step import DecodeBurst
from hybridrl.rollout.engine.model_runner import ModelRunner
from hybridrl.rollout.engine.scheduler import Scheduler, prefill_tokens
from hybridrl.rollout.engine.sequence import Sequence


@dataclass
class RunStats:
    """What the engine reports as rollout/* metrics: per batch call, or per `take_metrics` of the request API."""

    prefill_s: float = 0.0
    prefill_steps: int = 0
    prefill_steps_graphed: int = 0  # of them, replayed as a CUDA graph (short steps: follow-up turns)
    decode_s: float = 0.0  # device decoding: from a launch until the device has nothing queued
    decode_steps: int = 0
    bursts: int = 0
    chained: int = 0
    peak_blocks: int = 0
    prefill_tokens: int = 0  # tokens computed by prefills (prompt tokens the prefix cache did not hold)
    num_preempted: int = 0
    prefix_cache_hit_tokens: int = 0

    def see_blocks(self, used: int) -> None:
        """After each scheduling decision (its blocks are booked): the peak of blocks held."""
        self.peak_blocks = max(self.peak_blocks, used)

    def add_burst(self, num_steps: int, chained: bool) -> None:
        self.decode_steps += num_steps
        self.bursts += 1
        self.chained += int(chained)

    def metrics(self, num_kv_blocks: int) -> dict[str, float]:
        return {
            "rollout/prefill_time_s": self.prefill_s,
            "rollout/prefill_tokens": float(self.prefill_tokens),
            "rollout/prefill_steps": float(self.prefill_steps),
            # the prefill steps that replayed a CUDA graph; the others paid the eager forward's launch overhead
            "rollout/prefill_steps_graphed": float(self.prefill_steps_graphed),
            "rollout/decode_time_s": self.decode_s,
            "rollout/decode_steps": float(self.decode_steps),
            "rollout/decode_bursts": float(self.bursts),
            # bursts queued behind the previous one before its tokens reached the host
            "rollout/decode_bursts_chained": float(self.chained),
            "rollout/mean_decode_step_s": self.decode_s / max(self.decode_steps, 1),
            "rollout/num_preempted": float(self.num_preempted),
            "rollout/prefix_cache_hit_tokens": float(self.prefix_cache_hit_tokens),
            # the most blocks held at once (prompt blocks shared by a prompt's n samples count once), of
            # the cache's num_kv_blocks: how close this batch came to preempting
            "rollout/kv_cache_peak_blocks_max": float(self.peak_blocks),
            "rollout/kv_cache_peak_usage_max": self.peak_blocks / num_kv_blocks,
        }


class EngineCore:
    """Scheduler, the decode burst in flight, the runner's block-table slots and the run statistics."""

    def __init__(self, runner: ModelRunner, block_manager: BlockManager, max_num_seqs: int,
                 max_num_batched_tokens: int, max_decode_burst: int, queue_bursts: bool = True) -> None:
        self.runner = runner
        self.max_num_seqs, self.max_num_batched_tokens = max_num_seqs, max_num_batched_tokens
        self.max_decode_burst = max_decode_burst
        self.queue_bursts = queue_bursts
        self.scheduler = Scheduler(block_manager, max_num_seqs, max_num_batched_tokens)
        self.pending: DecodeBurst | None = None  # launched, its tokens not yet read
        self.stats = RunStats()
        self._free_slots: list[int] = []  # a heap: the smallest free slot first
        self._next_slot = 0
        self._busy_since = 0.0

    @property
    def block_manager(self) -> BlockManager:
        return self.scheduler.block_manager

    @property
    def has_work(self) -> bool:
        """Sequences to run, or a burst whose tokens are still to be read (it may hold only finished rows)."""
        return self.pending is not None or not self.scheduler.is_finished()

    def add(self, seq: Sequence) -> None:
        seq.slot = heapq.heappop(self._free_slots) if self._free_slots else self._take_new_slot()
        self.scheduler.add(seq)

    def _take_new_slot(self) -> int:
        self._next_slot += 1
        return self._next_slot - 1

    def abort(self, seq: Sequence) -> None:
        self.scheduler.abort(seq)
        heapq.heappush(self._free_slots, seq.slot)

    def step(self) -> list[Sequence]:
        """One prefill step, one decode burst read (the next one of the same rows queued first when the
        scheduler allows, so the device decodes it while the host books this one's tokens), or a prefill and
        then a burst read. Returns the sequences that finished."""
        if self.pending is None:
            seqs, is_prefill, num_steps = self._schedule()
            if is_prefill:
                finished = self._prefill(seqs)
                if finished or self.scheduler.waiting or not self.scheduler.running:
                    return finished
                # Every waiting sequence is in: decode at once, without a round trip to the caller first.
                seqs, is_prefill, num_steps = self._schedule()
            if not seqs:
                return []
            self.pending = self.runner.start_decode(seqs, num_steps)
            self.stats.add_burst(num_steps, chained=False)
        burst = self.pending
        following = self._continuation(burst)
        tokens, logprobs = burst.results()
        if following is None:  # the device idles from here until the next launch
            self.stats.decode_s += time.perf_counter() - self._busy_since
        self.pending = following
        return self._released(self.scheduler.postprocess(burst.seqs, tokens, logprobs))

    def _schedule(self) -> tuple[list[Sequence], bool, int]:
        """The next step's sequences (none when nothing runs or waits), whether it is a prefill, its length."""
        if self.scheduler.is_finished():
            return [], False, 0
        seqs, is_prefill, num_steps = self.scheduler.schedule(self.max_decode_burst)
        if not seqs:
            raise RuntimeError("the scheduler made no progress (a sequence cannot get KV blocks)")
        self.stats.see_blocks(self.block_manager.num_used_blocks)
        self._busy_since = time.perf_counter()
        return seqs, is_prefill, num_steps

    def _prefill(self, seqs: list[Sequence]) -> list[Sequence]:
        self.stats.prefill_tokens += sum(map(prefill_tokens, seqs))
        graphed_before = self.runner.prefill_graphs.num_runs
        tokens, logprobs = self.runner.run_prefill(seqs)
        self.stats.prefill_s += time.perf_counter() - self._busy_since
        self.stats.prefill_steps += 1
        self.stats.prefill_steps_graphed += self.runner.prefill_graphs.num_runs - graphed_before
        return self._released(self.scheduler.postprocess(seqs, tokens, logprobs))

    def _continuation(self, burst: DecodeBurst) -> DecodeBurst | None:
        if not self.queue_bursts:
            return None
        num_steps, limits = self.scheduler.continue_burst(burst.seqs, burst.num_steps, self.max_decode_burst)
        if not num_steps:
            return None
        self.stats.see_blocks(self.block_manager.num_used_blocks)
        self.stats.add_burst(num_steps, chained=True)
        return self.runner.continue_decode(burst, num_steps, limits)

    def _released(self, finished: list[Sequence]) -> list[Sequence]:
        for seq in finished:
            heapq.heappush(self._free_slots, seq.slot)
        return finished

    def drain(self) -> None:
        """Read the burst still queued (only finished or aborted rows can be in it once nothing runs)."""
        while self.pending is not None:
            self.step()

    def take_stats(self) -> RunStats:
        """The statistics since the last take (the scheduler's counters folded in), and start new ones."""
        stats, self.stats = self.stats, RunStats()
        stats.num_preempted += self.scheduler.num_preempted
        stats.prefix_cache_hit_tokens += self.scheduler.num_cached_tokens
        self.scheduler.num_preempted = self.scheduler.num_cached_tokens = 0
        return stats

    def restore_stats(self, stats: RunStats) -> None:
        """Continue counting into `stats` (taken before a batch call, so its numbers stay apart)."""
        self.stats = stats

    def reset(self, block_manager: BlockManager) -> None:
        """A new block manager (wake-up, new weights): only between generations, nothing in flight."""
        assert not self.has_work, "reset with sequences in flight"
        folded = self.take_stats()
        self.scheduler = Scheduler(block_manager, self.max_num_seqs, self.max_num_batched_tokens)
        self.stats = folded
