"""CUDA graphs for the decode step: one graph per padded batch size, all sharing one memory pool.

Decode at a few hundred sequences is launch-bound in eager mode (24 layers x ~15 kernels); replaying
a captured graph costs one launch. Eager fallback (same padding path) on CPU or with enforce_eager.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Callable

import torch

from hybridrl.logging.log import get_logger

log = get_logger("rollout.cuda_graph")

ENFORCE_EAGER_KEY = "actor_rollout_ref.rollout.enforce_eager"


class GraphCaptureError(RuntimeError):
    """A decode or prefill step could not be captured in a CUDA graph; the message names the key that turns
    graphs off."""


def capture_error(what: str, err: RuntimeError) -> GraphCaptureError:
    return GraphCaptureError(
        f"capturing {what} failed: {err}. Set {ENFORCE_EAGER_KEY}=true to run the engine without CUDA graphs "
        "(several times slower, same tokens); with tensor_model_parallel_size > 1 the all-reduces are captured "
        "too, which needs NCCL >= 2.9.6")


def smallest_at_least(sizes: list[int], n: int) -> int | None:
    """The smallest of the sorted `sizes` that is >= n (the graph a padded input replays), or None."""
    i = bisect.bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


# decode_fn(input_ids (B,), positions (B,), block_tables (B, M), context_lens (B,), slot_mapping (B,))
DecodeFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


FINE_LADDER_END = 512  # every 16 rows up to here; beyond it, eight sizes per doubling


def default_capture_sizes(max_batch_size: int) -> list[int]:
    """1, 2, 4, 8, 16, 32, every 16 up to 512, then eight sizes per doubling (every 64 up to 1024, every 128 up
    to 2048, ...), and max_batch_size itself.

    Asynchronous training keeps several batches' rows in flight (max_num_seqs in the thousands), and its decode
    batch takes most sizes between one and all of them as rows finish and others are admitted: each size met
    costs a capture. Past 512 rows the step is long enough that padding by at most an eighth costs less than
    the captures that every-16 sizes would take.
    """
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
    sizes = [s for s in (1, 2, 4, 8, 16, 32) if s < max_batch_size]
    sizes += range(48, min(max_batch_size, FINE_LADDER_END + 1), 16)
    size = FINE_LADDER_END
    while size < max_batch_size:
        size += 2 ** (size.bit_length() - 4)  # an eighth of the power of two at or below it
        sizes.append(min(size, max_batch_size))
    return sorted(set(sizes) | {max_batch_size})


def graph_sizes(requested: list[int] | None, max_num_seqs: int) -> list[int] | None:
    """`rollout.cudagraph_capture_sizes` for the runner: None keeps the default ladder; a list must lie in
    [1, max_num_seqs] and gets max_num_seqs added (every batch needs a graph at least its size)."""
    if requested is None:
        return None
    if not requested or min(requested) < 1 or max(requested) > max_num_seqs:
        raise ValueError(f"actor_rollout_ref.rollout.cudagraph_capture_sizes={requested} must be batch sizes in "
                         f"[1, max_num_seqs={max_num_seqs}] (or null for the default ladder)")
    return sorted(set(requested) | {max_num_seqs})


_capture_streams: dict[torch.device, torch.cuda.Stream] = {}


@contextmanager
def capturing(graph: torch.cuda.CUDAGraph, pool, device: torch.device) -> Iterator[None]:
    """`torch.cuda.graph(graph, pool=pool)` without what its entry also does: empty the device and pinned-
    host caches. A generation captures graphs mid-rollout (each new batch size, and all of them again after
    a wake-up that moved the KV cache), and emptying there handed the trainer's cached blocks back to the
    driver (H200 trace, a rank of two: 41 cudaFree, 10.7 ms, then re-allocated by the next training phase)
    and dropped the pinned buffers the decode bursts copy tokens into. The wake-up already sized the KV
    cache to leave generation's activations, this graph's pool included, free (kv_memory.py), emptying the
    cache itself when that needed it."""
    torch.cuda.synchronize(device)
    stream = _capture_streams.setdefault(device, torch.cuda.Stream(device))  # capture off the default stream
    with torch.cuda.stream(stream):
        graph.capture_begin(*(() if pool is None else (pool,)))
        try:
            yield
        finally:
            graph.capture_end()


class CUDAGraphDecodeRunner:
    """Runs `decode_fn` for B <= max_batch_size rows through the captured graph of the smallest size >= B.

    Padding rows get slot_mapping -1 (their K/V is not stored), context_len 1 and an all-zero block
    table (they read one cached token of block 0), so they cannot disturb real sequences. Tensors that
    `decode_fn` closes over (weights, KV cache) must keep their addresses between capture and replay:
    call `release()` before they move (a KV cache allocated elsewhere at wake-up) and the graphs are
    captured again on the next run.
    `decode_fn` must not synchronise with the host (no `.item()`, no data-dependent shapes).
    """

    def __init__(self, decode_fn: DecodeFn, max_batch_size: int, max_blocks_per_seq: int,
                 vocab_or_hidden_size: int, device: torch.device | str,
                 capture_sizes: list[int] | None = None, *, enforce_eager: bool = False,
                 eager_reason: str = "enforce_eager=True") -> None:
        self.decode_fn = decode_fn
        self.device = torch.device(device)
        self.capture_sizes = sorted(set(capture_sizes or default_capture_sizes(max_batch_size)))
        if self.capture_sizes[0] < 1 or self.capture_sizes[-1] > max_batch_size:
            raise ValueError(f"capture_sizes {self.capture_sizes} must lie in [1, max_batch_size="
                             f"{max_batch_size}]")
        self.max_blocks_per_seq = max_blocks_per_seq
        self.output_size = vocab_or_hidden_size
        self.use_graphs = self.device.type == "cuda" and not enforce_eager
        if not self.use_graphs:
            reason = eager_reason if enforce_eager else f"device {self.device} is not CUDA"
            # Expected (quiet) on CPU; worth an info line when graphs are off on CUDA or by request.
            level = logging.INFO if enforce_eager or self.device.type == "cuda" else logging.DEBUG
            log.log(level, "decode CUDA graphs off (%s): running the decode step eagerly", reason)
        rows, idx = self.capture_sizes[-1], dict(device=self.device)
        self.input_ids = torch.zeros(rows, dtype=torch.int64, **idx)
        self.positions = torch.zeros(rows, dtype=torch.int64, **idx)
        self.block_tables = torch.zeros(rows, max_blocks_per_seq, dtype=torch.int32, **idx)
        self.context_lens = torch.ones(rows, dtype=torch.int32, **idx)
        self.slot_mapping = torch.full((rows,), -1, dtype=torch.int64, **idx)
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._pool = None
        self._outputs: torch.Tensor | None = None  # (max size, vocab_or_hidden): the largest graph's output
        self.capture_time_s = 0.0  # every capture since construction (callers take differences)
        self.held_bytes = 0  # device memory the captured graphs hold (their pool and the output buffer)

    @property
    def captured(self) -> bool:
        return bool(self._graphs)

    @property
    def captured_sizes(self) -> list[int]:
        return sorted(self._graphs)

    def padded_size(self, batch_size: int) -> int | None:
        """The smallest capture size >= batch_size, or None when the batch is larger than all of them."""
        return smallest_at_least(self.capture_sizes, batch_size)

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, block_tables: torch.Tensor,
            context_lens: torch.Tensor, slot_mapping: torch.Tensor) -> torch.Tensor:
        """Decode one token for each of the B rows; returns (B, vocab_or_hidden_size).

        The result is a view of a static buffer that the next `run` overwrites: consume it first.
        """
        size = self.stage(input_ids, positions, block_tables, context_lens, slot_mapping)
        if size is None:  # larger than the largest graph: plain eager call, no padding
            return self.decode_fn(input_ids, positions, block_tables, context_lens, slot_mapping)
        return self.replay(size)[:input_ids.shape[0]]

    def stage(self, input_ids: torch.Tensor, positions: torch.Tensor, block_tables: torch.Tensor,
              context_lens: torch.Tensor, slot_mapping: torch.Tensor) -> int | None:
        """Copy a batch into the static buffers (capturing its graph first if needed); returns the padded
        size to `replay`, or None when the batch is larger than every graph (nothing staged)."""
        size = self.padded_size(input_ids.shape[0])
        if size is None:
            return None
        # Capture (lazily, on the first run after construction or `release`) before staging: capture
        # resets every static row to padding, so staging first made that step's replay decode padding
        # only (wrong logits, and no K/V stored for any row, so every later step diverged as well).
        if self.use_graphs and size not in self._graphs:
            # Lazily, per size: RL rollouts decode at a handful of batch sizes per generation; the
            # graphs outlive a sleep unless the KV cache moves (kv_cache.py).
            # The first size of a pool is its base (output buffer, pool memory); a batch larger than
            # the base (rows admitted after others finished) starts a fresh pool from the largest size,
            # so that no later batch outgrows it (each restart recaptures every size met again).
            sizes = [size]
            if self._graphs and size > self._outputs.shape[0]:
                torch.cuda.synchronize(self.device)  # a burst in flight may still replay the graphs released here
                self.release()
                sizes.append(self.capture_sizes[-1])
            self.capture(sizes)
        self._stage(size, input_ids, positions, block_tables, context_lens, slot_mapping)
        return size

    def replay(self, size: int) -> torch.Tensor:
        """Decode the `size` staged rows as the static buffers hold them now -> (size, output) view.

        A decode burst edits the buffers in place between replays (`views`) instead of staging again."""
        if not self.use_graphs:
            return self.decode_fn(*self.views(size))
        self._graphs[size].replay()
        return self._outputs[:size]

    def _stage(self, size: int, input_ids: torch.Tensor, positions: torch.Tensor,
               block_tables: torch.Tensor, context_lens: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """Copy B real rows into the static buffers and make rows B..size-1 harmless padding."""
        batch, width = block_tables.shape
        if width > self.max_blocks_per_seq:
            raise ValueError(f"block_tables has {width} columns but the decode graphs were sized for "
                             f"max_blocks_per_seq={self.max_blocks_per_seq}; raise it (max_model_len / block_size)")
        self.input_ids[:batch].copy_(input_ids, non_blocking=True)
        self.positions[:batch].copy_(positions, non_blocking=True)
        self.block_tables[:batch, :width].copy_(block_tables, non_blocking=True)
        # No stale ids past `width`: the Triton kernel reads only up to context_lens, but the torch backend
        # (run eagerly through these buffers) gathers every column, and a smaller cache after a wake-up
        # would not hold them.
        self.block_tables[:batch, width:].zero_()
        self.context_lens[:batch].copy_(context_lens, non_blocking=True)
        self.slot_mapping[:batch].copy_(slot_mapping, non_blocking=True)
        self._pad(batch, size)

    def _pad(self, batch: int, size: int) -> None:
        if size > batch:
            self.input_ids[batch:size].zero_()
            self.positions[batch:size].zero_()
            self.block_tables[batch:size].zero_()
            self.context_lens[batch:size].fill_(1)
            self.slot_mapping[batch:size].fill_(-1)  # stale slots would overwrite live sequences' KV

    def views(self, size: int) -> tuple[torch.Tensor, ...]:
        return (self.input_ids[:size], self.positions[:size], self.block_tables[:size],
                self.context_lens[:size], self.slot_mapping[:size])

    def capture(self, sizes: list[int] | None = None) -> None:
        """Capture `sizes` (default: every size), largest first so smaller graphs reuse its pool memory.

        The largest graph's own output tensor becomes the shared output buffer (no copy when the batch
        fills it, the common case in RL rollouts); smaller graphs copy their rows into it.
        """
        if not self.use_graphs:
            return
        if sizes is None or not self._graphs:
            self.release()  # a fresh pool: the largest graph first defines it and the output buffer
        sizes = sorted(set(sizes or self.capture_sizes))
        if self._graphs and sizes[-1] > self._outputs.shape[0]:
            raise ValueError(f"cannot add a graph of {sizes[-1]} rows to a pool based on {self._outputs.shape[0]} "
                             "rows; release() first")
        start, allocated_before = time.perf_counter(), torch.cuda.memory_allocated(self.device)
        # Warm-up and capture run on all-padding inputs (slot -1: no K/V written; shapes are what
        # matter). This clobbers any staged batch: `run` stages only after capturing.
        self._pad(0, self.capture_sizes[-1])
        for size in reversed(sizes):
            if size in self._graphs:
                continue
            self._check_output(self.decode_fn(*self.views(size)))  # warm-up: compiles Triton kernels
            graph = torch.cuda.CUDAGraph()
            self._capture_one(graph, size)
            if self._pool is None:
                self._pool = graph.pool()
            self._graphs[size] = graph
        torch.cuda.synchronize(self.device)
        self.held_bytes += torch.cuda.memory_allocated(self.device) - allocated_before
        elapsed = time.perf_counter() - start
        self.capture_time_s += elapsed
        log.debug("captured decode CUDA graphs for batch sizes %s in %.2f s", sizes, elapsed)

    def _capture_one(self, graph: torch.cuda.CUDAGraph, size: int) -> None:
        try:
            with capturing(graph, self._pool, self.device):
                out = self.decode_fn(*self.views(size))
                if self._outputs is None:
                    self._outputs = out
                else:
                    self._outputs[:size] = out
        except RuntimeError as err:  # CUDA and NCCL refuse uncapturable work with RuntimeError
            raise capture_error(f"the decode CUDA graph for {size} rows", err) from err

    def _check_output(self, sample: torch.Tensor) -> None:
        if sample.dim() != 2 or sample.shape[1] != self.output_size:
            raise ValueError(f"decode_fn returned shape {tuple(sample.shape)}, expected (B, "
                             f"{self.output_size}); pass vocab_or_hidden_size matching its output")

    def release(self) -> None:
        """Free the graphs, their memory pool and the output buffer; the next `run` captures again."""
        had_graphs = bool(self._graphs)
        self._graphs.clear()
        self._pool = None
        self._outputs = None
        self.held_bytes = 0
        if had_graphs:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
