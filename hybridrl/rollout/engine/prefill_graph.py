"""CUDA graphs for short prefill steps: the follow-up turns of agent loops, a few new tokens per sequence.

A follow-up turn (a tool's observation appended to a conversation whose earlier turns are in the prefix cache)
prefills a few dozen tokens per sequence. Its eager forward costs what launching a whole model's kernels
from Python costs (24 layers: about 16 ms on an H200, for some 30 ms of kernels over a whole multi-turn
rollout), and the decode bursts wait for it. A step whose every sequence has at most `GRAPH_MAX_QUERY` new
tokens instead replays a graph captured for its padded token count.

Shapes are static per graph: T tokens (the step's tokens padded up to the next size of `token_sizes`) and
`max_num_seqs` sequences. Padding tokens write no KV (slot -1) and belong to no sequence; padding sequences
have no queries (`query_start` repeats the last offset), so the attention kernel's programs for them exit at
once. Every sequence's queries fit one query tile (`triton_prefill.MAX_BLOCK_M` = `GRAPH_MAX_QUERY`).
The graphs return the hidden state of each sequence's last token; the LM head and the sampler run eagerly.
Off CUDA the same staging runs eagerly through the static buffers (what the CPU tests check).
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from hybridrl.rollout.engine.attention.metadata import AttentionMetadata
from hybridrl.rollout.engine.cuda_graph import capture_error, capturing, smallest_at_least

GRAPH_MAX_QUERY = 64  # new tokens per sequence a graphed step takes: one query tile of the prefill kernel
DEFAULT_TOKEN_SIZES = (64, 128, 256, 512, 1024, 2048, 4096)

# forward_fn(input_ids (T,), positions (T,), meta, last (S,)) -> hidden states of the `last` tokens (S, hidden)
PrefillForward = Callable[[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor], torch.Tensor]


def token_sizes_for(max_num_batched_tokens: int) -> list[int]:
    """The default token sizes up to the step budget; the budget itself when it is below the smallest."""
    sizes = [s for s in DEFAULT_TOKEN_SIZES if s <= max_num_batched_tokens]
    return sizes or [max_num_batched_tokens]


class CUDAGraphPrefillRunner:
    """Runs `forward_fn` for prefill steps it takes (`accepts`) through the graph of the smallest token size
    that holds them; the caller runs the other steps eagerly. The weights and the KV cache must keep their
    addresses between capture and replay: `release()` before they move."""

    def __init__(self, forward_fn: PrefillForward, max_num_seqs: int, max_blocks_per_seq: int,
                 token_sizes: list[int], device: torch.device | str, *, enabled: bool) -> None:
        self.forward_fn = forward_fn
        self.device = torch.device(device)
        self.token_sizes = sorted(set(token_sizes))
        self.max_num_seqs = max_num_seqs
        self.enabled = enabled
        self.use_graphs = enabled and self.device.type == "cuda"
        tokens, idx = self.token_sizes[-1], dict(device=self.device)
        self.input_ids = torch.zeros(tokens, dtype=torch.int64, **idx)
        self.positions = torch.zeros(tokens, dtype=torch.int64, **idx)
        self.slot_mapping = torch.full((tokens,), -1, dtype=torch.int64, **idx)
        self.block_tables = torch.zeros(max_num_seqs, max_blocks_per_seq, dtype=torch.int32, **idx)
        self.context_lens = torch.ones(max_num_seqs, dtype=torch.int32, **idx)
        self.query_start = torch.zeros(max_num_seqs + 1, dtype=torch.int32, **idx)
        self.last = torch.zeros(max_num_seqs, dtype=torch.int64, **idx)
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}  # size -> (graph, its output)
        self._pool = None
        self.num_runs = 0  # steps run through the static buffers (replays on CUDA), for the step metrics
        self.capture_time_s = 0.0  # every capture since construction (callers take differences)
        self.held_bytes = 0  # device memory the captured graphs hold (their pool and outputs)

    @property
    def captured(self) -> bool:
        return bool(self._graphs)

    def accepts(self, meta: AttentionMetadata, num_tokens: int) -> int | None:
        """The token size of the graph that runs this step, or None when it runs eagerly (runner off, a
        sequence with more than GRAPH_MAX_QUERY new tokens, more tokens or sequences than the graphs hold)."""
        if not self.enabled or meta.max_seqlen_q > GRAPH_MAX_QUERY or len(meta.context_lens) > self.max_num_seqs:
            return None
        return smallest_at_least(self.token_sizes, num_tokens)

    def run(self, size: int, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
            last: torch.Tensor) -> torch.Tensor:
        """The step staged into the graph of `size` tokens (from `accepts`) -> (S, hidden), a view of that
        graph's output buffer, overwritten by its next replay."""
        if self.use_graphs and not self._graphs:
            self.capture()  # before staging: capture leaves the buffers as padding
        self._stage(size, input_ids, positions, meta, last)
        self.num_runs += 1
        num_seqs = last.shape[0]
        if not self.use_graphs:
            return self.forward_fn(*self._views(size))[:num_seqs]
        graph, output = self._graphs[size]
        graph.replay()
        return output[:num_seqs]

    def _views(self, size: int) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor]:
        meta = AttentionMetadata(True, self.slot_mapping[:size], self.block_tables, self.context_lens,
                                 self.query_start, max_seqlen_q=GRAPH_MAX_QUERY)
        return self.input_ids[:size], self.positions[:size], meta, self.last

    def _stage(self, size: int, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
               last: torch.Tensor) -> None:
        tokens, (seqs, width) = input_ids.shape[0], meta.block_tables.shape
        self.input_ids[:tokens].copy_(input_ids)
        self.positions[:tokens].copy_(positions)
        self.slot_mapping[:tokens].copy_(meta.slot_mapping)
        self.block_tables[:seqs, :width].copy_(meta.block_tables)
        self.context_lens[:seqs].copy_(meta.context_lens)
        self.query_start[:seqs + 1].copy_(meta.query_start)
        self.last[:seqs].copy_(last)
        self._pad(tokens, size, seqs)

    def _pad(self, tokens: int, size: int, seqs: int) -> None:
        """Tokens past the step's write no KV (a stale slot would overwrite a live sequence's); sequences past
        its have no queries (their last offset repeated) and read token 0 as their `last`."""
        self.input_ids[tokens:size].zero_()
        self.positions[tokens:size].zero_()
        self.slot_mapping[tokens:size].fill_(-1)
        self.query_start[seqs + 1:].copy_(self.query_start[seqs].expand(self.max_num_seqs - seqs))
        self.last[seqs:].zero_()

    def capture(self) -> None:
        """Capture every token size, largest first (it sizes the shared memory pool), on padding inputs."""
        start, allocated_before = time.perf_counter(), torch.cuda.memory_allocated(self.device)
        self._pad(0, self.token_sizes[-1], 0)
        for size in reversed(self.token_sizes):
            self.forward_fn(*self._views(size))  # warm-up: compiles the Triton kernels for these shapes
            graph = torch.cuda.CUDAGraph()
            try:
                with capturing(graph, self._pool, self.device):
                    output = self.forward_fn(*self._views(size))
            except RuntimeError as err:  # CUDA and NCCL refuse uncapturable work with RuntimeError
                raise capture_error(f"the prefill CUDA graph for {size} tokens", err) from err
            if self._pool is None:
                self._pool = graph.pool()
            self._graphs[size] = (graph, output)
        torch.cuda.synchronize(self.device)
        self.held_bytes += torch.cuda.memory_allocated(self.device) - allocated_before
        self.capture_time_s += time.perf_counter() - start

    def release(self) -> None:
        """Free the graphs and their pool; the next step they take captures them again."""
        had_graphs = bool(self._graphs)
        self._graphs.clear()
        self._pool = None
        self.held_bytes = 0
        if had_graphs:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
