"""Data plane: the paged KV cache, step inputs from scheduled sequences, model forward and sampling.

Decode runs through `decode_fn(input_ids, positions, block_tables, context_lens, slot_mapping) -> logits`,
a static-shape callable that a CUDA-graph runner (cuda_graph.py) replays on CUDA unless enforce_eager.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import torch

from hybridrl.rollout.engine.attention import select_backend
from hybridrl.rollout.engine.attention.metadata import AttentionMetadata
from hybridrl.rollout.engine.cuda_graph import CUDAGraphDecodeRunner, graph_sizes
from hybridrl.rollout.engine.decode_step import (LaunchedStep, batch_setting, copy_to_host, record_and_advance,
                                                 sampler_for, step_started)
from hybridrl.rollout.engine.kv_cache import PagedKVCache
from hybridrl.rollout.engine.parallel import SINGLE, TensorParallel
from hybridrl.rollout.engine.prefill_graph import CUDAGraphPrefillRunner, token_sizes_for
from hybridrl.rollout.engine.sampler import gumbel_argmax, sample
from hybridrl.rollout.engine.sequence import Sequence

# Samplers kept per batch setting (one for a batch call; per mix of settings for requests).
MAX_CACHED_SAMPLERS = 64


class HostBlockTables:
    """Host-side block tables indexed by sequence slot (`Sequence.slot`, unique among live sequences): prefill
    writes whole rows, decode only new blocks.

    Columns past a row's blocks hold 0, never an earlier sequence's ids: batched gathers read every column
    of the (B, max blocks) table, and after a wake-up with a smaller cache such ids lie past its end.
    Saves rebuilding a (B, M) table from Python lists every decode step (a block is added per 16 tokens).
    """

    def __init__(self, max_blocks_per_seq: int) -> None:
        self.table = np.zeros((0, max_blocks_per_seq), dtype=np.int32)
        self.num_synced = np.zeros(0, dtype=np.int64)

    def _write(self, seq: Sequence, start: int) -> None:
        if seq.slot >= len(self.table):
            rows = max(2 * len(self.table), seq.slot + 1)
            self.table = np.resize(self.table, (rows, self.table.shape[1]))
            self.num_synced = np.resize(self.num_synced, rows)
        self.table[seq.slot, start:len(seq.block_table)] = seq.block_table[start:]
        if start == 0:  # the slot's previous sequence may have held more blocks: no stale ids in its tail
            self.table[seq.slot, len(seq.block_table):] = 0
        self.num_synced[seq.slot] = len(seq.block_table)

    def gather(self, seqs: list[Sequence], full: bool) -> np.ndarray:
        """(B, max blocks in the batch) int32; `full` rewrites every row (after (re)allocation)."""
        for seq in seqs:
            if full or seq.slot >= len(self.table):
                self._write(seq, 0)
            elif len(seq.block_table) > self.num_synced[seq.slot]:
                self._write(seq, int(self.num_synced[seq.slot]))
        rows = np.fromiter((s.slot for s in seqs), dtype=np.int64, count=len(seqs))
        return self.table[rows, :int(self.num_synced[rows].max())]


class ModelRunner:
    def __init__(self, model: torch.nn.Module, device: torch.device, block_size: int, max_num_seqs: int,
                 max_model_len: int, enforce_eager: bool, capture_sizes: list[int] | None = None, *,
                 max_num_batched_tokens: int, keep_graphs: bool = True, tp: TensorParallel = SINGLE,
                 batch_invariant: bool = False) -> None:
        self.model = model
        self.device = device
        self.block_size = block_size
        self.max_blocks_per_seq = -(-max_model_len // block_size)
        self.layers = model.attention_layers()
        first = self.layers[0]
        self.num_kv_heads, self.head_dim = first.num_kv_heads, first.head_dim
        self.dtype = next(model.parameters()).dtype
        # batch_invariant: the kernels the trainer's forward shares (batch_invariant.py), token log-probs included
        self.batch_invariant = batch_invariant
        if batch_invariant:
            from hybridrl.rollout.engine.batch_invariant import use_batch_invariant_kernels

            backend = use_batch_invariant_kernels(model)
        else:
            backend = select_backend(device, self.head_dim)
        for layer in self.layers:
            layer.backend = backend
        self.kv_store = PagedKVCache((2, len(self.layers), block_size, self.num_kv_heads, self.head_dim), self.dtype,
                                     device, tp)
        # Decode graphs outlive a sleep when the cache comes back at the same address (kv_cache.py).
        self.keep_graphs = keep_graphs
        self.host_block_tables = HostBlockTables(self.max_blocks_per_seq)
        self._samplers: dict[tuple, object] = {}
        # Eager, the noise hash is ~17 kernels over (B, V); compiled, noise + argmax fuse into one.
        compiled = device.type == "cuda" and not enforce_eager
        self.gumbel_argmax = torch.compile(gumbel_argmax, dynamic=True) if compiled else gumbel_argmax
        # The torch backend is not capturable (e.g. head_dim 96, Phi-3): the same runner then runs eagerly, decode
        # bursts editing its static buffers in place.
        eager_reason = "enforce_eager=True" if enforce_eager else f"the {backend.name} attention backend"
        graphs_off = device.type == "cuda" and (enforce_eager or not backend.capturable)
        self.graph_runner = CUDAGraphDecodeRunner(
            self.decode_fn, max_num_seqs, self.max_blocks_per_seq, self.model.config.vocab_size, self.device,
            graph_sizes(capture_sizes, max_num_seqs), enforce_eager=graphs_off, eager_reason=eager_reason)
        self.prefill_graphs = CUDAGraphPrefillRunner(
            self.prefill_hidden, max_num_seqs, self.max_blocks_per_seq, token_sizes_for(max_num_batched_tokens),
            self.device, enabled=device.type == "cuda" and not graphs_off)

    # --- KV cache -------------------------------------------------------------------------------
    @property
    def block_bytes(self) -> int:
        """Bytes of one KV block across all layers (K and V)."""
        return self.kv_store.block_bytes

    @property
    def kv_cache(self) -> torch.Tensor | None:
        """(2, L, num_blocks, block_size, Hkv, D) while awake, viewed per layer; None while asleep."""
        return self.kv_store.tensor

    @property
    def graphs_held_bytes(self) -> int:
        """Device memory the captured decode and prefill graphs hold."""
        return self.graph_runner.held_bytes + self.prefill_graphs.held_bytes

    @property
    def graphs_capture_time_s(self) -> float:
        return self.graph_runner.capture_time_s + self.prefill_graphs.capture_time_s

    def release_graphs(self) -> None:
        self.graph_runner.release()
        self.prefill_graphs.release()

    def allocate_kv_cache(self, num_blocks: int) -> None:
        if self.kv_store.allocate(num_blocks):
            self.release_graphs()  # captured against a cache that is gone
        for i, layer in enumerate(self.layers):
            layer.k_cache, layer.v_cache = self.kv_cache[0, i], self.kv_cache[1, i]

    def free_kv_cache(self) -> None:
        """Free the KV cache; the decode graphs go too unless they can replay against its next allocation."""
        if not (self.keep_graphs and self.kv_store.stable_address):
            self.release_graphs()  # graphs hold the cache's addresses
        for layer in self.layers:
            layer.k_cache = layer.v_cache = torch.empty(0)
        self.kv_store.free()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # generation's cached activations, for the trainer

    @torch.inference_mode()
    def warmup(self, max_num_batched_tokens: int, max_model_len: int, max_num_seqs: int) -> None:
        """Everything a generation holds beside the KV cache, to measure its peak: the largest decode graph
        (its memory pool lives as long as the graph), then, with it held, the largest prefill step, the
        largest sampling batch and one eager decode of the largest batch (what capturing one more graph size
        allocates). Without the graph pool in the measure, a wake-up that fitted the cache to the memory free
        left a full-batch graph short of its logits (H200, 10,752 rows: 3.04 GiB asked, 2.88 free).

        Dummy sequences all point at one scratch block: the gathered context has the real size.
        """
        seq_len = min(max_model_len, max_num_batched_tokens)
        num_seqs = max(1, min(max_num_batched_tokens // seq_len, max_num_seqs))
        seqs = [Sequence(i, [0] * seq_len, 1, seed=0) for i in range(num_seqs)]
        for seq in seqs:
            seq.block_table = [0] * seq.num_blocks(self.block_size)
        self.allocate_kv_cache(1)
        largest = self.graph_runner.capture_sizes[-1]
        self.graph_runner.capture([largest])  # no-op when decode runs eagerly; pads every row onto block 0
        if self.prefill_graphs.use_graphs:
            self.prefill_graphs.capture()
        input_ids, positions, meta, last = self.prepare_prefill(seqs)
        self.model.compute_logits(self.prefill_hidden(input_ids, positions, meta, last))
        logits = torch.zeros(max_num_seqs, self.model.config.vocab_size, device=self.device, dtype=self.dtype)
        keys = torch.zeros(max_num_seqs, dtype=torch.int64, device=self.device)
        sample(logits, 1.0, -1, 0.9, False, keys, keys, self.gumbel_argmax)
        del logits
        self.decode_fn(*self.graph_runner.views(largest))  # the static buffers hold padding rows (block 0)
        self.free_kv_cache()
        self.release_graphs()  # captured against a one-block cache: no generation can use them

    # --- step inputs ----------------------------------------------------------------------------
    def _tensor(self, data: list, dtype: torch.dtype) -> torch.Tensor:
        t = torch.tensor(data, dtype=dtype, pin_memory=self.device.type == "cuda")
        return t.to(self.device, non_blocking=True)

    def _from_numpy(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device, non_blocking=True)

    def prepare_prefill(self, seqs: list[Sequence]):
        """Flattened new tokens of all sequences (after their prefix-cache hits) and their metadata. A fully
        cached prompt recomputes its last token (for the logits) without storing its KV again. Built with
        numpy: a follow-up step of an agent loop stages thousands of tokens between two decode bursts."""
        count = len(seqs)
        cached = np.fromiter((s.num_cached_tokens for s in seqs), dtype=np.int64, count=count)
        ends = np.fromiter((s.num_tokens for s in seqs), dtype=np.int64, count=count)
        starts = np.minimum(cached, ends - 1)
        query_start = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=query_start[1:])
        total = int(query_start[-1])
        seq_index = np.repeat(np.arange(count), ends - starts)
        positions = np.arange(total) - query_start[seq_index] + starts[seq_index]
        tables = self.host_block_tables.gather(seqs, full=True)
        slots = tables[seq_index, positions // self.block_size].astype(np.int64) * self.block_size
        slots += positions % self.block_size
        slots[positions < cached[seq_index]] = -1
        input_ids = np.fromiter(itertools.chain.from_iterable(
            s.token_ids[start:] for s, start in zip(seqs, starts.tolist())), dtype=np.int64, count=total)
        meta = AttentionMetadata(
            is_prefill=True, slot_mapping=self._from_numpy(slots), block_tables=self._from_numpy(tables),
            context_lens=self._from_numpy(ends.astype(np.int32)),
            query_start=self._from_numpy(query_start.astype(np.int32)), max_seqlen_q=int((ends - starts).max()))
        return (self._from_numpy(input_ids), self._from_numpy(positions), meta,
                self._from_numpy(query_start[1:] - 1))

    def prepare_decode(self, seqs: list[Sequence], ahead: np.ndarray) -> tuple[torch.Tensor, ...]:
        """Each sequence's next decode input: (input_ids, positions, block_tables, context_lens, slot_mapping).

        ahead (B,): tokens a row has past the host's view, sampled by a step still in flight; such a row's input
        is the last of them, at position `len(seq) - 1 + ahead` (its id, unknown here, is filled on the device
        by `launch_burst`; 0 stands in)."""
        tables = self.host_block_tables.gather(seqs, full=False)
        num_tokens = np.fromiter((s.num_tokens for s in seqs), dtype=np.int64, count=len(seqs))
        positions = num_tokens - 1 + ahead
        slots = tables[np.arange(len(seqs)), positions // self.block_size] * self.block_size
        slots += positions % self.block_size
        input_ids = np.fromiter((s.last_token for s in seqs), dtype=np.int64, count=len(seqs))
        return (self._from_numpy(input_ids), self._from_numpy(positions), self._from_numpy(tables),
                self._from_numpy((positions + 1).astype(np.int32)), self._from_numpy(slots.astype(np.int64)))

    # --- forward --------------------------------------------------------------------------------
    def decode_fn(self, input_ids: torch.Tensor, positions: torch.Tensor, block_tables: torch.Tensor,
                  context_lens: torch.Tensor, slot_mapping: torch.Tensor) -> torch.Tensor:
        """One decode token per row -> logits (B, V). Static shapes, no host sync: graph-capturable."""
        meta = AttentionMetadata(False, slot_mapping, block_tables, context_lens)
        return self.model.compute_logits(self.model(input_ids, positions, meta))

    def prefill_hidden(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                       last: torch.Tensor) -> torch.Tensor:
        """A prefill step's forward -> the final hidden states of the tokens at `last` (S, hidden)."""
        return self.model(input_ids, positions, meta)[last]

    @torch.inference_mode()
    def launch_prefill(self, seqs: list[Sequence]) -> LaunchedStep:
        """Launch the prefill of `seqs` (after prefix-cache hits): each sequence's first token and its log-prob,
        sampled by its own `sampling` spec, as a one-step `LaunchedStep`. Nothing waits for the device: a
        burst launched next reads the tokens there. Short steps (follow-up turns) replay a prefill graph."""
        clock, started = time.perf_counter(), step_started(self.device)
        input_ids, positions, meta, last = self.prepare_prefill(seqs)
        size = self.prefill_graphs.accepts(meta, input_ids.shape[0])
        if size is None:
            hidden = self.prefill_hidden(input_ids, positions, meta, last)
        else:
            hidden = self.prefill_graphs.run(size, input_ids, positions, meta, last)
        logits = self.model.compute_logits(hidden)
        tokens, logprobs = self._sampler(seqs)(logits, self._seeds(seqs), self._positions(seqs))
        (host_tokens, host_logprobs), done = copy_to_host(tokens[:, None], logprobs[:, None])
        return LaunchedStep(seqs, 1, tokens, host_tokens, host_logprobs, done, started,
                            time.perf_counter() - clock)

    @torch.inference_mode()
    def launch_burst(self, seqs: list[Sequence], num_steps: int, limits: list[int], ahead: np.ndarray,
                     sources: list[tuple[LaunchedStep, list[int], list[int]]]) -> LaunchedStep:
        """Launch a burst of `num_steps` decode steps for `seqs`; its `results()` are (B, num_steps) tokens and
        log-probs, a row's entries past its limit junk to drop. Sampled tokens feed the next step on the device
        (`record_and_advance`), and each step replays the decode graph of the padded batch size.

        The scheduler reserved the KV blocks: `limits` (B,) is each row's first position past them. A row
        `ahead` of the host's view takes its first input from the step in flight that sampled it: `sources`
        lists (step, its row indices, this burst's row indices)."""
        clock, started = time.perf_counter(), step_started(self.device)
        batch = len(seqs)
        size = self.graph_runner.stage(*self.prepare_decode(seqs, ahead))
        if size is None:
            raise ValueError(f"{batch} sequences in one decode step exceed max_num_seqs "
                             f"({self.graph_runner.capture_sizes[-1]})")
        ids, positions, tables, context_lens, slots = (v[:batch] for v in self.graph_runner.views(size))
        for step, rows, into in sources:
            ids[self._from_numpy(np.asarray(into))] = step.last_tokens[self._from_numpy(np.asarray(rows))]
        limits_t = self._from_numpy(np.asarray(limits, dtype=np.int64))
        # `steps`: the position of the token each row samples next, which keys its noise with `keys` (_positions)
        keys, steps, sampler = self._seeds(seqs), positions + 1, self._sampler(seqs)
        out_tokens = torch.empty(batch, num_steps, dtype=torch.int64, device=self.device)
        out_logprobs = torch.empty(batch, num_steps, dtype=torch.float32, device=self.device)
        for i in range(num_steps):
            tokens, logprobs = sampler(self.graph_runner.replay(size)[:batch], keys, steps)
            record_and_advance(tokens, logprobs, out_tokens, out_logprobs, i, ids, positions, tables, context_lens,
                               slots, limits_t, steps, self.block_size, advance=i + 1 < num_steps)
        (host_tokens, host_logprobs), done = copy_to_host(out_tokens, out_logprobs)
        return LaunchedStep(seqs, num_steps, tokens, host_tokens, host_logprobs, done, started,
                            time.perf_counter() - clock)

    def _seeds(self, seqs: list[Sequence]) -> torch.Tensor:
        return self._tensor([s.seed for s in seqs], torch.int64)

    def _positions(self, seqs: list[Sequence]) -> torch.Tensor:
        """The absolute position of the token each sequence samples next: with its key, what its noise
        depends on (sampler.py), so a resumed request continues the noise of the interrupted one."""
        return self._tensor([s.num_tokens for s in seqs], torch.int64)

    def _sampler(self, seqs: list[Sequence]):
        """The batch's sampler, built once per setting: building one copies its parameters to the device, which
        would wait for the step in flight."""
        key = batch_setting([s.sampling for s in seqs])
        sampler = self._samplers.get(key)
        if sampler is None:
            if len(self._samplers) >= MAX_CACHED_SAMPLERS:
                self._samplers.clear()
            sampler = sampler_for(list(key), self.device, self.gumbel_argmax)
            if self.batch_invariant:
                from hybridrl.rollout.engine.batch_invariant import with_invariant_log_probs

                sampler = with_invariant_log_probs(sampler, key, self.device)
            self._samplers[key] = sampler
        return sampler
