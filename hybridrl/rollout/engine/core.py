"""The engine's one step loop, under both the batch call and the request API.

`EngineCore.step()` queues the device's next work behind what is in flight, then reads the oldest: it admits
waiting sequences (their prefill queued behind the decode burst in flight), queues the next burst of every
running row behind both, and reads the burst that was in flight and the prefill. Rows whose newest tokens the
host has not read yet take them from the device (`ModelRunner.launch_burst`), so the device never waits for the
host while there is work; a row whose stop token the host has not seen yet decodes one burst as junk (dropped).
Sequences may be added and aborted between steps: an added one is prefilled by the next step and decodes with
the running ones in the burst after it (continuous batching).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from hybridrl.rollout.engine.block_manager import BlockManager
from hybridrl.rollout.engine.decode_step import LaunchedStep
from hybridrl.rollout.engine.model_runner import ModelRunner
from hybridrl.rollout.engine.scheduler import Scheduler, prefill_tokens
from hybridrl.rollout.engine.sequence import Sequence


@dataclass
class RunStats:
    """What the engine reports as rollout/* metrics: per batch call, or per `take_metrics` of the request API."""

    prefill_s: float = 0.0  # device time of the prefill steps
    prefill_steps: int = 0
    prefill_steps_graphed: int = 0  # of them, replayed as a CUDA graph (short steps: follow-up turns)
    decode_s: float = 0.0  # device time of the decode bursts
    decode_steps: int = 0
    decode_row_steps: int = 0  # rows x steps summed over the bursts (junk rows of a stop in flight included)
    generated_tokens: int = 0  # tokens the sequences kept (finished or not, whether or not trained this step)
    bursts: int = 0
    chained: int = 0
    peak_blocks: int = 0
    prefill_tokens: int = 0  # tokens computed by prefills (prompt tokens the prefix cache did not hold)
    num_preempted: int = 0
    prefix_cache_hit_tokens: int = 0
    graph_capture_s: float = 0.0  # CUDA graphs captured on the way (lazily, per decode batch size met)

    def see_blocks(self, used: int) -> None:
        """After each scheduling decision (its blocks are booked): the peak of blocks held."""
        self.peak_blocks = max(self.peak_blocks, used)

    def add_burst(self, num_rows: int, num_steps: int, chained: bool) -> None:
        self.decode_steps += num_steps
        self.decode_row_steps += num_rows * num_steps
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
            # rows per decode step: how full continuous batching kept the engine
            "rollout/mean_decode_rows": self.decode_row_steps / max(self.decode_steps, 1),
            # every token sampled and kept, in-flight requests' included: the engine's output, which an
            # asynchronous trainer's trained tokens per step only match once its in-flight inventory is full
            "rollout/num_generated_tokens": float(self.generated_tokens),
            "rollout/num_preempted": float(self.num_preempted),
            "rollout/prefix_cache_hit_tokens": float(self.prefix_cache_hit_tokens),
            # the most blocks held at once (prompt blocks shared by a prompt's n samples count once), of
            # the cache's num_kv_blocks: how close this batch came to preempting
            "rollout/kv_cache_peak_blocks_max": float(self.peak_blocks),
            "rollout/kv_cache_peak_usage_max": self.peak_blocks / num_kv_blocks,
            # graphs are captured lazily (decode: per batch size); again after a wake-up only when the KV cache moved
            "rollout/graph_capture_s": self.graph_capture_s,
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
        self.pending: LaunchedStep | None = None  # a burst launched, its tokens not yet read
        self.stats = RunStats()
        self._free_slots: list[int] = []  # a heap: the smallest free slot first
        self._next_slot = 0

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
        """Admit and prefill waiting sequences, queue the next burst, read what was in flight; returns the
        sequences that finished. While sequences still wait after an admission with nothing in flight, the step
        is the prefill alone (prefill first: the rest are admitted before decoding starts)."""
        burst = self.pending
        admitted = self.scheduler.admit()
        prefill = self._launch_prefill(admitted) if admitted else None
        if burst is None and prefill is not None and self.scheduler.waiting:
            return self._read_prefill(prefill)
        self.pending = self._next_burst(burst, prefill)
        if burst is None and prefill is None:  # nothing was in flight: read the burst just launched
            return self.step() if self.pending is not None else []
        finished = self._read_burst(burst) if burst is not None else []
        return finished + (self._read_prefill(prefill) if prefill is not None else [])

    def _launch_prefill(self, seqs: list[Sequence]) -> LaunchedStep:
        self.stats.see_blocks(self.block_manager.num_used_blocks)
        self.stats.prefill_tokens += sum(map(prefill_tokens, seqs))
        self.stats.prefill_steps += 1
        graphed_before = self.runner.prefill_graphs.num_runs
        with self._capture_time_counted():
            prefill = self.runner.launch_prefill(seqs)
        self.stats.prefill_steps_graphed += self.runner.prefill_graphs.num_runs - graphed_before
        return prefill

    @contextmanager
    def _capture_time_counted(self) -> Iterator[None]:
        """Adds the graph captures of a launch to the statistics."""
        captured_before = self.runner.graphs_capture_time_s
        yield
        self.stats.graph_capture_s += self.runner.graphs_capture_time_s - captured_before

    def _next_burst(self, burst: LaunchedStep | None, prefill: LaunchedStep | None) -> LaunchedStep | None:
        """The burst of every running row, queued behind the burst and prefill in flight (None when nothing
        runs, or the free blocks do not cover it while steps are in flight: the host reads them first).
        With nothing in flight and blocks short: one step, which may preempt."""
        in_flight = burst is not None or prefill is not None
        if in_flight and not self.queue_bursts:
            return None
        rows, ahead, sources = self._burst_rows(burst, prefill)
        if not rows:
            return None
        length, limits = (self.scheduler.plan_burst(rows, ahead, self.max_decode_burst)
                          if len(rows) <= self.max_num_seqs else (0, []))
        if not length:
            if in_flight:
                return None
            rows = self.scheduler.schedule_single_step()
            length, limits, ahead, sources = 1, [len(seq) for seq in rows], [0] * len(rows), []
        self.stats.see_blocks(self.block_manager.num_used_blocks)
        self.stats.add_burst(len(rows), length, chained=burst is not None)
        with self._capture_time_counted():
            return self.runner.launch_burst(rows, length, limits, np.asarray(ahead, dtype=np.int64), sources)

    def _burst_rows(self, burst: LaunchedStep | None, prefill: LaunchedStep | None
                    ) -> tuple[list[Sequence], list[int], list[tuple[LaunchedStep, list[int], list[int]]]]:
        """The running rows with budget left after the tokens the steps in flight sample for them; per row,
        how many those are; per step in flight, (step, its row indices, the burst's row indices)."""
        # Keyed by the objects (sequences hash by identity), not by id(): id() is an audit event, and an audit hook
        # (filelock installs one on Python 3.12+) would run Python code for every row of every burst.
        steps = [step for step in (burst, prefill) if step is not None]
        in_flight = {seq: (k, i) for k, step in enumerate(steps) for i, seq in enumerate(step.seqs)}
        rows: list[Sequence] = []
        ahead: list[int] = []
        sources: dict[int, tuple[LaunchedStep, list[int], list[int]]] = {}
        for seq in self.scheduler.running:
            k, index = in_flight.get(seq, (None, 0))
            unseen = steps[k].num_steps if k is not None else 0
            if seq.num_remaining_tokens <= unseen:  # it finishes in the step in flight
                continue
            if k is not None:
                _, from_rows, into_rows = sources.setdefault(k, (steps[k], [], []))
                from_rows.append(index)
                into_rows.append(len(rows))
            rows.append(seq)
            ahead.append(unseen)
        return rows, ahead, list(sources.values())

    def _read_burst(self, burst: LaunchedStep) -> list[Sequence]:
        tokens, logprobs = burst.results()
        self.stats.decode_s += burst.device_seconds()
        return self._released(self.scheduler.postprocess(burst.seqs, tokens, logprobs))

    def _read_prefill(self, prefill: LaunchedStep) -> list[Sequence]:
        tokens, logprobs = prefill.results()
        self.stats.prefill_s += prefill.device_seconds()
        return self._released(self.scheduler.postprocess(prefill.seqs, tokens, logprobs))

    def _released(self, finished: list[Sequence]) -> list[Sequence]:
        for seq in finished:
            heapq.heappush(self._free_slots, seq.slot)
        return finished

    def drain(self) -> None:
        """Read the burst still queued, queueing nothing behind it (only finished or aborted rows can be in it
        once nothing runs)."""
        if self.pending is not None:
            burst, self.pending = self.pending, None
            self._read_burst(burst)

    def take_stats(self) -> RunStats:
        """The statistics since the last take (the scheduler's counters folded in), and start new ones."""
        stats, self.stats = self.stats, RunStats()
        stats.num_preempted += self.scheduler.num_preempted
        stats.prefix_cache_hit_tokens += self.scheduler.num_cached_tokens
        stats.generated_tokens += self.scheduler.num_generated_tokens
        self.scheduler.num_preempted = self.scheduler.num_cached_tokens = self.scheduler.num_generated_tokens = 0
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
