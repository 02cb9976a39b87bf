"""Continuous batching: prefill-first steps, then decode steps; preemption by recompute (no torch).

A step is either all-prefill or all-decode (nano-vllm style). Prefill admits waiting sequences in
order while the token budget (`max_num_batched_tokens`, counting only tokens not in the prefix cache)
and `max_num_seqs` allow. Decode advances every running sequence by one token; when blocks run out,
the most recently admitted sequence is preempted: its blocks are freed and it returns to the front of
the waiting queue with its generated tokens, so re-prefilling it continues it exactly.
Requests come and go between steps (`add`, `abort`); a request's full blocks go into the prefix cache
when it leaves (`Sequence.cache_on_finish`), so a follow-up turn extending it skips their prefill.
"""

from __future__ import annotations

from collections import deque

from hybridrl.rollout.engine.block_manager import BlockManager
from hybridrl.rollout.engine.sequence import Sequence, SequenceStatus


# A burst is queued behind the one in flight only while at least this share of its rows still run; below
# it the host restages the live rows alone (a smaller batch, a smaller graph).
MIN_LIVE_TO_CONTINUE = 0.75


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: deque[Sequence] = deque()
        self.num_preempted = 0
        self.num_cached_tokens = 0  # prefix-cache hits summed over admitted sequences

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def is_finished(self) -> bool:
        return not self.waiting and not self.running

    def abort(self, seq: Sequence) -> None:
        """Take a waiting or running sequence out, keeping its tokens (stop_reason `abort`). A decode burst
        may still be writing its KV on the device: only into its own blocks past what the host has seen,
        which a later allocation, queued behind that burst, overwrites before reading."""
        if seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        elif seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self._release(seq)
        seq.finish("abort")

    def _release(self, seq: Sequence) -> None:
        if seq.cache_on_finish:
            self.block_manager.cache_written_blocks(seq)
        self.block_manager.deallocate(seq)

    def schedule(self, max_steps: int = 1) -> tuple[list[Sequence], bool, int]:
        """Pick the next step's sequences; returns (seqs, is_prefill, num_steps).

        Decode runs a burst of up to `max_steps` steps (one host round trip) when every running
        sequence can reserve its blocks for it without preemption; else one step, which may preempt.
        """
        scheduled = self._schedule_prefill()
        if scheduled:
            return scheduled, True, 1
        num_steps = self._burst_length(max_steps)
        if num_steps > 1:
            for seq in self.running:
                self.block_manager.reserve(seq, min(num_steps, seq.num_remaining_tokens))
            return list(self.running), False, num_steps
        return self._schedule_decode(), False, 1

    def continue_burst(self, seqs: list[Sequence], num_steps: int, max_steps: int) -> tuple[int, list[int]]:
        """The burst to queue behind one in flight (`num_steps` steps for `seqs`, tokens not yet seen), so
        the device need not wait while the host reads them: (length, per-row limits), or (0, []) when the
        host must look first (a row's budget ends in the burst, sequences wait, too few live rows, blocks
        short). Rows whose stop token the in-flight burst samples decode one more burst as junk, dropped by
        `postprocess`. A limit is a row's first position past its budget; 0 for finished rows."""
        live = [s for s in seqs if s.status is SequenceStatus.RUNNING]
        if (max_steps <= 1 or self.waiting or len(live) < MIN_LIVE_TO_CONTINUE * len(seqs)
                or any(s.num_remaining_tokens <= num_steps for s in live)):
            return 0, []
        budgets = [s.num_remaining_tokens - num_steps for s in live]
        length = min(max_steps, max(budgets))
        spans = [num_steps + min(length, b) for b in budgets]  # KV slots past len(seq) - 1, both bursts
        bm = self.block_manager
        if sum(bm.blocks_to_reserve(s, n) for s, n in zip(live, spans)) > bm.num_free_blocks:
            return 0, []
        for seq, span in zip(live, spans):
            bm.reserve(seq, span)
        live_spans = iter(spans)  # in `seqs` order, one per running row
        return length, [len(s) - 1 + next(live_spans) if s.status is SequenceStatus.RUNNING else 0 for s in seqs]

    def _burst_length(self, max_steps: int) -> int:
        """Steps the next decode burst can run: the longest remaining budget (capped at max_steps), or
        the shortest one while sequences wait (so finished ones make room early); 1 when blocks are short."""
        if max_steps <= 1 or len(self.running) > self.max_num_seqs:
            return 1
        remaining = [seq.num_remaining_tokens for seq in self.running]
        num_steps = min(max_steps, min(remaining) if self.waiting else max(remaining))
        needed = sum(self.block_manager.blocks_to_reserve(s, min(num_steps, r)) for s, r in zip(self.running, remaining))
        return num_steps if needed <= self.block_manager.num_free_blocks else 1

    def _schedule_prefill(self) -> list[Sequence]:
        scheduled: list[Sequence] = []
        num_tokens = 0
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            hits = self.block_manager.prefix_hits(seq)
            num_cached = len(hits) * self.block_manager.block_size
            new_tokens = seq.num_tokens - min(num_cached, seq.num_tokens - 1)
            # A sequence longer than the whole budget still runs, alone, rather than never.
            if scheduled and num_tokens + new_tokens > self.max_num_batched_tokens:
                break
            if not self.block_manager.can_allocate(seq):
                break
            self.block_manager.allocate(seq, hits)
            self.num_cached_tokens += num_cached
            if seq.prefix_cache_hit_tokens is None:  # first admission (a preempted one comes back)
                seq.prefix_cache_hit_tokens = num_cached
            num_tokens += new_tokens
            seq.status = SequenceStatus.RUNNING
            self.running.append(self.waiting.popleft())
            scheduled.append(seq)
        return scheduled

    def _schedule_decode(self) -> list[Sequence]:
        bm = self.block_manager
        if len(self.running) <= min(self.max_num_seqs, bm.num_free_blocks):  # common case: no preemption
            for seq in self.running:
                bm.may_append(seq)
            return list(self.running)
        scheduled: list[Sequence] = []
        while self.running and len(scheduled) < self.max_num_seqs:
            seq = self.running.popleft()
            while not self.block_manager.can_append(seq):
                if self.running:
                    self._preempt(self.running.pop())
                else:
                    self._preempt(seq)
                    break
            else:
                self.block_manager.may_append(seq)
                scheduled.append(seq)
        assert scheduled or not self.running, "a running sequence could not get a single KV block"
        self.running.extendleft(reversed(scheduled))
        return scheduled

    def _preempt(self, seq: Sequence) -> None:
        self.num_preempted += 1
        seq.num_preempted += 1
        seq.status = SequenceStatus.WAITING
        self._release(seq)
        self.waiting.appendleft(seq)

    def postprocess(self, seqs: list[Sequence], token_ids: list[list[int]], logprobs: list[list[float]]
                    ) -> list[Sequence]:
        """Append each sequence's new tokens (one list per sequence, one entry per step of the burst) up
        to its stop; free and return the ones that finished. Tokens after a stop are dropped: a burst
        keeps decoding finished rows until the host looks."""
        finished = []
        for seq, seq_tokens, seq_logprobs in zip(seqs, token_ids, logprobs):
            if seq.status is not SequenceStatus.RUNNING:  # finished during the burst before (a junk row)
                continue
            if seq.append_tokens(seq_tokens, seq_logprobs):
                seq.finish()
                self._release(seq)
                finished.append(seq)
        if finished:
            self.running = deque(s for s in self.running if s.status is SequenceStatus.RUNNING)
        return finished


def prefill_tokens(seq: Sequence) -> int:
    """Tokens a prefill computes: those not in the prefix cache, and at least the last one (for its logits)."""
    return seq.num_tokens - min(seq.num_cached_tokens, seq.num_tokens - 1)
