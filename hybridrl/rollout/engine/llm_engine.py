"""`LLMEngine`: the `hybrid` rollout backend (paged KV cache, continuous batching, prefix sharing)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Iterable

import torch

from hybridrl.logging.log import get_logger
from hybridrl.rollout.base import RolloutOutput, SamplingParams
from hybridrl.rollout.engine.block_manager import BlockManager
from hybridrl.rollout.engine.decode_step import DecodeBurst
from hybridrl.rollout.engine.kv_memory import MARGIN_BYTES, blocks_for_generation, fitting_blocks
from hybridrl.rollout.engine.loader import build_engine_model
from hybridrl.rollout.engine.model_runner import ModelRunner
from hybridrl.rollout.engine.models import load_weights
from hybridrl.rollout.engine.parallel import SINGLE, TensorParallel
from hybridrl.rollout.engine.sampler import row_key
from hybridrl.rollout.engine.scheduler import Scheduler
from hybridrl.rollout.engine.sequence import Sequence

CPU_KV_CAP_BYTES = 1 << 30
KEEP_GRAPHS_KEY = "actor_rollout_ref.rollout.keep_decode_graphs"
log = get_logger("rollout.engine")


class LLMEngine:
    """Generates rollouts from its own copy of the policy's weights (`update_weights` refreshes it)."""

    def __init__(self, model: torch.nn.Module | str, *, tokenizer_eos_ids: Iterable[int] = (),
                 dtype: torch.dtype | None = None, device: torch.device | str | None = None,
                 gpu_memory_utilization: float = 0.5, block_size: int = 16, max_num_seqs: int = 256,
                 max_num_batched_tokens: int = 8192, max_model_len: int | None = None,
                 enforce_eager: bool = False, enable_prefix_caching: bool = True,
                 num_kv_blocks: int | None = None, seed: int = 0, max_decode_burst: int = 16,
                 tp: TensorParallel = SINGLE, cudagraph_capture_sizes: list[int] | None = None,
                 keep_decode_graphs: bool = True) -> None:
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"actor_rollout_ref.rollout.gpu_memory_utilization ({gpu_memory_utilization}) "
                             "must be in (0, 1]; try 0.5")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model, self.config, self.max_model_len, eos = build_engine_model(
            model, dtype, self.device, max_model_len, tp)
        self.tp = tp
        self.eos_ids = frozenset(eos | set(tokenizer_eos_ids))
        self.gpu_memory_utilization = gpu_memory_utilization
        self.block_size, self.max_num_seqs = block_size, max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enable_prefix_caching = enable_prefix_caching
        self.seed, self.num_calls = seed, 0
        if max_decode_burst < 1:
            raise ValueError(f"max_decode_burst ({max_decode_burst}) must be >= 1 (1: a host round trip every step)")
        # Decode steps per host round trip: sampled tokens stay on the device in between.
        self.max_decode_burst = max_decode_burst
        self.runner = ModelRunner(self.model, self.device, block_size, max_num_seqs, self.max_model_len,
                                  enforce_eager, cudagraph_capture_sizes, keep_graphs=keep_decode_graphs, tp=tp)
        self.kv_block_budget: int | None = None  # blocks gpu_memory_utilization allows (set by profiling on CUDA)
        self.activation_bytes: int | None = None  # generation's activation peak beside the cache (CUDA profiling)
        self.planned_kv_blocks = num_kv_blocks or self._profile_num_kv_blocks()
        if self.planned_kv_blocks < 1:
            raise ValueError("no memory left for the KV cache; raise actor_rollout_ref.rollout."
                             f"gpu_memory_utilization ({gpu_memory_utilization})")
        self.num_kv_blocks = self.planned_kv_blocks  # this generation's cache: fewer when memory got short
        self._smallest_warned = self.planned_kv_blocks
        self._told_graphs_kept = False
        self.wake_up()

    # --- memory ---------------------------------------------------------------------------------
    @property
    def kv_cache_bytes(self) -> int:
        return self.num_kv_blocks * self.runner.block_bytes

    def _profile_num_kv_blocks(self) -> int:
        """Blocks for max_num_seqs sequences of max_model_len tokens (more can never be in use at once),
        capped by a memory budget. CPU budget: 1 GiB. CUDA budget: util x total memory minus the engine's
        weights and the activation peak of a warm-up step (vLLM >= 0.7 semantics; vLLM then takes the
        whole budget, which for a small policy reserved ~65 GB of an H200 that no step could use)."""
        workload = self.max_num_seqs * -(-self.max_model_len // self.block_size)
        if self.device.type != "cuda":
            return max(1, min(workload, CPU_KV_CAP_BYTES // self.runner.block_bytes))
        fitting = max(self._cuda_kv_budget_bytes() // self.runner.block_bytes, 0)
        budget = self.kv_block_budget = self.tp.agree_min(fitting)  # the replica's ranks: one cache size
        blocks = min(workload, budget)
        log.info("KV cache: %d blocks of %d tokens (%.2f GiB), %s", blocks, self.block_size,
                 blocks * self.runner.block_bytes / 2**30,
                 f"enough for max_num_seqs={self.max_num_seqs} x max_model_len={self.max_model_len}; "
                 f"gpu_memory_utilization={self.gpu_memory_utilization} would allow {budget}"
                 if blocks == workload else
                 f"all that gpu_memory_utilization={self.gpu_memory_utilization} allows (the workload could use "
                 f"{workload}: longer batches preempt)")
        return int(blocks)

    def _cuda_kv_budget_bytes(self) -> int:
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.runner.warmup(self.max_num_batched_tokens, self.max_model_len, self.max_num_seqs)
        activation_bytes = self.activation_bytes = torch.cuda.max_memory_allocated(self.device) - before
        weight_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        # Deltas, not totals: a trainer sharing this process and GPU is not the engine's share.
        free, total = torch.cuda.mem_get_info(self.device)
        budget = self.gpu_memory_utilization * total - weight_bytes - activation_bytes
        # never plan past what is actually free (the warm-up's activations are still held by the allocator)
        return int(min(budget, free - MARGIN_BYTES))

    def sleep(self) -> None:
        """Free the KV cache; weights stay (`update_weights` works while asleep). The decode CUDA graphs stay
        too when the cache returns to the same address at wake-up (kv_cache.py) and keep_decode_graphs."""
        self.runner.free_kv_cache()
        self.block_manager = None
        graphs = self.runner.graph_runner
        if graphs.captured and not self._told_graphs_kept:
            self._told_graphs_kept = True
            log.info("decode CUDA graphs are kept while the engine sleeps (its KV cache comes back at the same "
                     "address): %.2f GiB held between generations (%s=false frees them)",
                     graphs.held_bytes / 2**30, KEEP_GRAPHS_KEY)

    def wake_up(self) -> None:
        if self.runner.kv_cache is None:
            self.num_kv_blocks = self._blocks_free_now()
            self.runner.allocate_kv_cache(self.num_kv_blocks)
        self._reset_prefix_cache()

    def _blocks_free_now(self) -> int:
        """The planned cache, or a smaller one when the memory free now would not also hold generation's
        activations (kv_memory.py); warns when the cache first shrinks and whenever it shrinks further."""
        if self.device.type != "cuda" or self.activation_bytes is None:
            return self.planned_kv_blocks
        free, _ = torch.cuda.mem_get_info(self.device)
        # Graphs kept from the last generation already hold their part of the activations (not free now).
        activation_bytes = max(self.activation_bytes - self.runner.graph_runner.held_bytes, 0)
        if fitting_blocks(free, activation_bytes, self.runner.block_bytes) < self.planned_kv_blocks:
            # Only now hand the allocator's unused cached blocks (the trainer's) back to the driver: each costs
            # a cudaFree, and training allocates them again afterwards.
            torch.cuda.empty_cache()
            free, _ = torch.cuda.mem_get_info(self.device)
        size = blocks_for_generation(self.planned_kv_blocks, free, activation_bytes, self.runner.block_bytes,
                                     self.gpu_memory_utilization)
        if size.warning and size.blocks < self._smallest_warned:
            log.warning(size.warning)
            self._smallest_warned = size.blocks
        return self.tp.agree_min(size.blocks)

    def _reset_prefix_cache(self) -> None:
        self.block_manager = BlockManager(self.num_kv_blocks, self.block_size, self.enable_prefix_caching)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy HF-named tensors into the engine's parameters in place (dtype cast per tensor)."""
        load_weights(self.model, named_tensors)
        if self.block_manager is not None:
            self._reset_prefix_cache()  # cached KV was computed by the old weights

    # --- generation -----------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutOutput:
        if self.block_manager is None:
            raise RuntimeError("LLMEngine.generate called while asleep; call wake_up() first")
        seqs = self._make_sequences(prompts, params)
        scheduler = Scheduler(self.block_manager, self.max_num_seqs, self.max_num_batched_tokens)
        for seq in seqs:
            scheduler.add(seq)
        captured_before = self.runner.graph_runner.capture_time_s
        metrics = self._run(scheduler, params)
        # Decode graphs are captured lazily per batch size; again after a wake-up only when the KV cache moved.
        metrics["rollout/graph_capture_s"] = self.runner.graph_runner.capture_time_s - captured_before
        return RolloutOutput([s.completion_token_ids for s in seqs], [s.output_logprobs for s in seqs], metrics)

    def _make_sequences(self, prompts: list[list[int]], params: SamplingParams) -> list[Sequence]:
        if params.n < 1 or params.max_new_tokens < 1:
            raise ValueError(f"n ({params.n}) and max_new_tokens ({params.max_new_tokens}) must be >= 1")
        longest = max((len(p) for p in prompts), default=0)
        self._check_fits(longest, params.max_new_tokens)
        seed = params.seed if params.seed is not None else self.seed + self.num_calls
        self.num_calls += 1
        stop_ids = frozenset() if params.ignore_eos else self.eos_ids | set(params.eos_token_ids)
        hashes = [[] for _ in prompts]  # one prefix-hash cache per prompt, shared by its n samples
        samples = ((p, h) for p, h in zip(prompts, hashes) for _ in range(params.n))
        return [Sequence(row, list(p), params.max_new_tokens, row_key(seed, params.row_offset + row), stop_ids, h)
                for row, (p, h) in enumerate(samples)]

    def _check_fits(self, prompt_len: int, response_len: int) -> None:
        total = prompt_len + response_len
        if total > self.max_model_len:
            raise ValueError(
                f"prompt ({prompt_len} tokens) + actor_rollout_ref.rollout.response_length ({response_len}) "
                f"exceeds the engine's max_model_len ({self.max_model_len}); lower the response length to "
                f"{self.max_model_len - prompt_len} or data.max_prompt_length")
        needed = math.ceil(total / self.block_size)
        if needed <= self.num_kv_blocks:
            return
        capacity = self.num_kv_blocks * self.block_size
        util = min(0.95, math.ceil(self.gpu_memory_utilization * needed / self.num_kv_blocks * 20) / 20)
        if self.num_kv_blocks < self.planned_kv_blocks:  # shrunk at wake-up: the trainer holds the memory
            raise ValueError(
                f"one sequence ({prompt_len} prompt + {response_len} response tokens) needs {needed} KV blocks, but "
                f"only {self.num_kv_blocks} of the {self.planned_kv_blocks} planned fit in the memory free at this "
                "generation. Free trainer memory while generating: actor_rollout_ref.actor.fsdp_config."
                "optimizer_offload=true, actor_rollout_ref.ref.fsdp_config.param_offload=true; or shorten "
                f"actor_rollout_ref.rollout.response_length (now {response_len})")
        raise ValueError(
            f"one sequence ({prompt_len} prompt + {response_len} response tokens) needs {needed} KV blocks of "
            f"{self.block_size} tokens, but the whole KV cache has {self.num_kv_blocks} blocks ({capacity} "
            f"tokens, {self.kv_cache_bytes / 2**20:.1f} MiB). Try: actor_rollout_ref.rollout.response_length="
            f"{max(capacity - prompt_len, 0)} (or less), or actor_rollout_ref.rollout.gpu_memory_utilization="
            f"{util} (now {self.gpu_memory_utilization}), or actor_rollout_ref.rollout.max_num_seqs="
            f"{max(1, self.max_num_seqs // 2)} (now {self.max_num_seqs}; fewer concurrent sequences leave "
            "more memory to the KV cache)")

    def _run(self, scheduler: Scheduler, params: SamplingParams) -> dict[str, float]:
        """Prefill and decode steps until every sequence finished. While a decode burst runs on the device
        the next one of the same rows is queued behind it when the scheduler allows (`continue_burst`),
        so the host reads and books a burst's tokens while the device already decodes the next."""
        stats = RunStats()
        pending: DecodeBurst | None = None
        busy_since = 0.0
        while pending is not None or not scheduler.is_finished():
            if pending is None:
                seqs, is_prefill, num_steps = scheduler.schedule(self.max_decode_burst)
                if not seqs:
                    raise RuntimeError("the scheduler made no progress (a sequence cannot get KV blocks)")
                stats.see_blocks(self.block_manager.num_used_blocks)
                busy_since = time.perf_counter()
                if is_prefill:
                    tokens, logprobs = self.runner.run_prefill(seqs, params)
                    stats.prefill_s += time.perf_counter() - busy_since
                    scheduler.postprocess(seqs, tokens, logprobs)
                    continue
                pending = self.runner.start_decode(seqs, num_steps, params)
                stats.add_burst(num_steps, chained=False)
            following = self._continuation(scheduler, pending, stats)
            tokens, logprobs = pending.results()
            if following is None:  # the device idles from here until the next launch
                stats.decode_s += time.perf_counter() - busy_since
            scheduler.postprocess(pending.seqs, tokens, logprobs)
            pending = following
        return stats.metrics(scheduler, self.num_kv_blocks)

    def _continuation(self, scheduler: Scheduler, burst: DecodeBurst, stats: RunStats) -> DecodeBurst | None:
        num_steps, limits = scheduler.continue_burst(burst.seqs, burst.num_steps, self.max_decode_burst)
        if not num_steps:
            return None
        stats.see_blocks(self.block_manager.num_used_blocks)
        stats.add_burst(num_steps, chained=True)
        return self.runner.continue_decode(burst, num_steps, limits)


@dataclass
class RunStats:
    """What one `generate` reports as rollout/* metrics."""

    prefill_s: float = 0.0
    decode_s: float = 0.0  # device decoding: from a launch until the device has nothing queued
    decode_steps: int = 0
    bursts: int = 0
    chained: int = 0
    peak_blocks: int = 0

    def see_blocks(self, used: int) -> None:
        """After each scheduling decision (its blocks are booked): the peak of blocks held."""
        self.peak_blocks = max(self.peak_blocks, used)

    def add_burst(self, num_steps: int, chained: bool) -> None:
        self.decode_steps += num_steps
        self.bursts += 1
        self.chained += int(chained)

    def metrics(self, scheduler: Scheduler, num_kv_blocks: int) -> dict[str, float]:
        return {
            "rollout/prefill_time_s": self.prefill_s,
            "rollout/decode_time_s": self.decode_s,
            "rollout/decode_steps": float(self.decode_steps),
            "rollout/decode_bursts": float(self.bursts),
            # bursts queued behind the previous one before its tokens reached the host
            "rollout/decode_bursts_chained": float(self.chained),
            "rollout/mean_decode_step_s": self.decode_s / max(self.decode_steps, 1),
            "rollout/num_preempted": float(scheduler.num_preempted),
            "rollout/prefix_cache_hit_tokens": float(scheduler.num_cached_tokens),
            # the most blocks held at once (prompt blocks shared by a prompt's n samples count once), of
            # the cache's num_kv_blocks: how close this batch came to preempting
            "rollout/kv_cache_peak_blocks_max": float(self.peak_blocks),
            "rollout/kv_cache_peak_usage_max": self.peak_blocks / num_kv_blocks,
        }
