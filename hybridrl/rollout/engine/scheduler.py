"""Continuous batching: prefill steps and decode bursts; preemption by recompute (no torch).

A step is either all-prefill or all-decode (nano-vllm style). Prefill admits waiting sequences in
order while the token budget (`max_num_batched_tokens`, counting only tokens not in the prefix cache)
and `max_num_seqs` allow. A decode burst advances every running sequence by up to `max_steps` tokens,
with blocks reserved for all of them (`plan_burst`); bursts and prefills are booked before the host has
seen the tokens of the steps in flight (the engine queues them behind those steps). When blocks run out,
a single step (`schedule_single_step`) preempts the most recently admitted sequence: its blocks are freed
and it returns to the front of the waiting queue with its generated tokens, so re-prefilling it continues
it exactly. Requests come and go between steps (`add`, `abort`); a request's full blocks go into the prefix
cache when it leaves (`Sequence.cache_on_finish`), so a follow-up turn extending it skips their prefill.
"""

from __future__ import annotations

from collections import deque

from hybridrl.rollout.engine.block_manager import BlockManager
from hybridrl.rollout.engine.sequence import Sequence, SequenceStatus


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: deque[Sequence] = deque()
        self.num_preempted = 0
        self.num_cached_tokens = 0  # prefix-cache hits summed over admitted sequences
        self.num_generated_tokens = 0  # tokens appended to sequences (a stop's junk tail not counted)

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

    def plan_burst(self, rows: list[Sequence], ahead: list[int], max_steps: int) -> tuple[int, list[int]]:
        """Book a decode burst of up to `max_steps` steps for `rows`, each `ahead[i]` tokens past the host's view
        (sampled by a step still in flight, whose stop tokens the host has not seen: such a row decodes the
        burst as junk, dropped by `postprocess`). Every row must have budget left after its unseen tokens.

        The burst runs to the longest remaining budget, or the shortest one while sequences wait (so finished
        ones make room early). Returns (length, limits), a row's limit its first position past the blocks
        reserved for it; (0, []) when the free blocks do not cover the burst (nothing is reserved)."""
        budgets = [seq.num_remaining_tokens - unseen for seq, unseen in zip(rows, ahead)]
        assert min(budgets) > 0, "a row whose budget ends in the step in flight has nothing to decode"
        length = min(max_steps, min(budgets) if self.waiting else max(budgets))
        spans = [unseen + min(length, budget) for unseen, budget in zip(ahead, budgets)]
        bm = self.block_manager
        if sum(bm.blocks_to_reserve(seq, span) for seq, span in zip(rows, spans)) > bm.num_free_blocks:
            return 0, []
        for seq, span in zip(rows, spans):
            bm.reserve(seq, span)
        return length, [len(seq) - 1 + span for seq, span in zip(rows, spans)]

    def admit(self) -> list[Sequence]:
        """Admit waiting sequences in order while the token budget and `max_num_seqs` allow: the next
        prefill step's sequences, their blocks allocated (none when nothing waits or fits)."""
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

    def schedule_single_step(self) -> list[Sequence]:
        """One decode step for the running sequences, when a burst's blocks are short: a block each for their
        newest tokens, preempting the most recently admitted ones while blocks run out."""
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
            before = seq.num_tokens
            stopped = seq.append_tokens(seq_tokens, seq_logprobs)
            self.num_generated_tokens += seq.num_tokens - before
            if stopped:
                seq.finish()
                self._release(seq)
                finished.append(seq)
        if finished:
            self.running = deque(s for s in self.running if s.status is SequenceStatus.RUNNING)
        return finished


def prefill_tokens(seq: Sequence) -> int:
    """Tokens a prefill computes: those not in the prefix cache, and at least the last one (for its logits)."""
    return seq.num_tokens - min(seq.num_cached_tokens, seq.num_tokens - 1)
