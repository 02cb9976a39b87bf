"""`LLMEngine`: the `hybrid` rollout backend (paged KV cache, continuous batching, prefix sharing).

Two ways in, one step loop under both (core.py): the batch call `generate(prompts, params)` of synchronous
RL, and the request API (`add_request`, `abort_request`, `step`; `request_engine()` is its asyncio front
end) for agent loops and asynchronous training, where requests with their own sampling parameters come
and go while others decode.
"""

from __future__ import annotations

import gc
import math
from array import array
from typing import Iterable

import torch

from hybridrl.logging.log import get_logger
from hybridrl.rollout.base import RolloutOutput, SamplingParams, TokenOutput
from hybridrl.rollout.engine.block_manager import BlockManager, ResumedChains, prompt_hash_chain
from hybridrl.rollout.engine.async_engine import AsyncLLMEngine
from hybridrl.rollout.engine.core import EngineCore
from hybridrl.rollout.engine.kv_memory import MARGIN_BYTES, blocks_for_generation, fitting_blocks
from hybridrl.rollout.engine.loader import build_engine_model
from hybridrl.rollout.engine.model_runner import ModelRunner
from hybridrl.rollout.engine.models import load_weights
from hybridrl.rollout.engine.parallel import SINGLE, TensorParallel
from hybridrl.rollout.engine.sampler import row_key
from hybridrl.rollout.engine.requests import check_request, sampling_spec, stop_token_set, token_output
from hybridrl.rollout.engine.sequence import Sequence, SequenceStatus

CPU_KV_CAP_BYTES = 1 << 30
KEEP_GRAPHS_KEY = "actor_rollout_ref.rollout.keep_decode_graphs"
# Decode steps per burst. With every burst queued behind the one in flight the host's round trips are hidden, so
# shorter bursts cost nothing but save the junk steps a row decodes after its stop token: 8 was faster than 16
# single-turn and multi-turn on one H200, the batch call within noise (benchmarks/README.md, multiturn_bench.py).
DEFAULT_DECODE_BURST = 8
log = get_logger("rollout.engine")


class LLMEngine:
    """Generates rollouts from its own copy of the policy's weights (`update_weights` refreshes it)."""

    def __init__(self, model: torch.nn.Module | str, *, tokenizer_eos_ids: Iterable[int] = (),
                 dtype: torch.dtype | None = None, device: torch.device | str | None = None,
                 gpu_memory_utilization: float = 0.5, block_size: int = 16, max_num_seqs: int = 256,
                 max_num_batched_tokens: int = 8192, max_model_len: int | None = None,
                 enforce_eager: bool = False, enable_prefix_caching: bool = True,
                 num_kv_blocks: int | None = None, seed: int = 0, max_decode_burst: int = DEFAULT_DECODE_BURST,
                 tp: TensorParallel = SINGLE, cudagraph_capture_sizes: list[int] | None = None,
                 keep_decode_graphs: bool = True, fp32_residual: bool = True, queue_bursts: bool = True,
                 recompute_kv_after_weight_updates: bool = True, batch_invariant: bool = False) -> None:
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"actor_rollout_ref.rollout.gpu_memory_utilization ({gpu_memory_utilization}) "
                             "must be in (0, 1]; try 0.5")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        # fp32_residual: 16-bit weights, fp32 residual stream, as the trainer's forward (models/numerics.py);
        # False: the residual stream in the weights' dtype, as a plain HF bf16 forward
        self.model, self.config, self.max_model_len, eos = build_engine_model(
            model, dtype, self.device, max_model_len, tp, fp32_residual)
        self.tp = tp
        self.eos_ids = frozenset(eos | set(tokenizer_eos_ids))
        self.gpu_memory_utilization = gpu_memory_utilization
        self.block_size, self.max_num_seqs = block_size, max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enable_prefix_caching = enable_prefix_caching
        # False: the prefix cache (aborted requests' KV included) outlives `update_weights` (see there)
        self.recompute_kv_after_weight_updates = recompute_kv_after_weight_updates
        self.seed, self.num_calls = seed, 0
        if max_decode_burst < 1:
            raise ValueError(f"max_decode_burst ({max_decode_burst}) must be >= 1 (1: a host round trip every step)")
        # Decode steps per host round trip: sampled tokens stay on the device in between.
        self.max_decode_burst = max_decode_burst
        # Queue the next burst behind the one in flight (the device never waits for the host between bursts);
        # False: the host reads each burst first, so a row that stops in it never decodes one more as junk.
        self.queue_bursts = queue_bursts
        self.runner = ModelRunner(self.model, self.device, block_size, max_num_seqs, self.max_model_len,
                                  enforce_eager, cudagraph_capture_sizes, keep_graphs=keep_decode_graphs, tp=tp,
                                  max_num_batched_tokens=max_num_batched_tokens, batch_invariant=batch_invariant)
        self.kv_block_budget: int | None = None  # blocks gpu_memory_utilization allows (set by profiling on CUDA)
        self.activation_bytes: int | None = None  # generation's activation peak beside the cache (CUDA profiling)
        self.planned_kv_blocks = num_kv_blocks or self._profile_num_kv_blocks()
        if self.planned_kv_blocks < 1:
            raise ValueError("no memory left for the KV cache; raise actor_rollout_ref.rollout."
                             f"gpu_memory_utilization ({gpu_memory_utilization})")
        self.num_kv_blocks = self.planned_kv_blocks  # this generation's cache: fewer when memory got short
        self._smallest_warned = self.planned_kv_blocks
        self._told_graphs_kept = False
        self.core: EngineCore | None = None  # the step loop (core.py), built at the first wake-up
        self.block_manager: BlockManager | None = None
        self.requests: dict[str, Sequence] = {}  # request API: request id -> its sequence, while in flight
        self.resumed_chains = ResumedChains(max_num_seqs)  # aborted requests' block hashes, for their resumption
        self._async_engine: AsyncLLMEngine | None = None
        self.wake_up()
        if self.device.type == "cuda":
            freeze_startup_heap()

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
        """Free the KV cache; weights stay (`update_weights` works while asleep). The CUDA graphs stay
        too when the cache returns to the same address at wake-up (kv_cache.py) and keep_decode_graphs.
        Requests in flight must be aborted first (their KV would be lost)."""
        self._refuse_with_requests("sleep")
        if self.core is not None:
            self.core.drain()  # a queued burst still writes into the cache
        self.runner.free_kv_cache()
        self.block_manager = None
        if self.runner.graphs_held_bytes and not self._told_graphs_kept:
            self._told_graphs_kept = True
            log.info("CUDA graphs are kept while the engine sleeps (its KV cache comes back at the same "
                     "address): %.2f GiB held between generations (%s=false frees them)",
                     self.runner.graphs_held_bytes / 2**30, KEEP_GRAPHS_KEY)

    def wake_up(self) -> None:
        self._refuse_with_requests("wake_up")
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
        activation_bytes = max(self.activation_bytes - self.runner.graphs_held_bytes, 0)
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
        if self.core is None:
            self.core = EngineCore(self.runner, self.block_manager, self.max_num_seqs, self.max_num_batched_tokens,
                                   self.max_decode_burst, self.queue_bursts)
        else:
            self.core.drain()
            self.core.reset(self.block_manager)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy HF-named tensors into the engine's parameters in place (dtype cast per tensor). Requests in
        flight must be aborted first (resume them afterwards). The prefix cache, KV computed by the old
        weights, is dropped; with `recompute_kv_after_weight_updates=False` it is kept, so a resumed request
        finds its aborted self's KV there and prefills only the tokens past its last full block."""
        self._refuse_with_requests("update_weights")
        if self.core is not None:
            self.core.drain()  # a queued burst still reads the old weights
        load_weights(self.model, named_tensors)
        if self.block_manager is not None and self.recompute_kv_after_weight_updates:
            self._reset_prefix_cache()

    def _refuse_with_requests(self, action: str) -> None:
        if self.requests:
            raise RuntimeError(
                f"LLMEngine.{action} with {len(self.requests)} requests in flight; abort them first "
                "(abort_request, or `await engine.request_engine().abort_all()`), then resume each as a new request "
                "(rollout.base.resume_request) once the engine is ready again")

    # --- the batch call ---------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutOutput:
        """`params.n` samples of every prompt, prompt-major (RolloutOutput): the rows are requests of the core
        with one shared sampling spec (the sampler's all-same fast path), run until all have finished."""
        core = self._awake_core("generate")
        if self.requests:
            raise RuntimeError(f"LLMEngine.generate (the batch call) while {len(self.requests)} requests of the "
                               "request API are in flight; wait for them or abort them first")
        seqs = self._make_sequences(prompts, params)
        core.drain()
        request_stats = core.take_stats()  # the request API's numbers stay apart from this call's
        for seq in seqs:
            core.add(seq)
        try:
            while core.has_work:
                core.step()
        finally:
            for seq in seqs:  # interrupted (an exception): no row of this call may linger in the scheduler
                if seq.status is not SequenceStatus.FINISHED:
                    core.abort(seq)
            stats = core.take_stats()
            core.restore_stats(request_stats)
        metrics = stats.metrics(self.num_kv_blocks)
        return RolloutOutput([s.completion_token_ids for s in seqs], [s.output_logprobs.tolist() for s in seqs], metrics)

    def _awake_core(self, action: str) -> EngineCore:
        if self.block_manager is None or self.core is None:
            raise RuntimeError(f"LLMEngine.{action} called while asleep; call wake_up() first")
        return self.core

    def _make_sequences(self, prompts: list[list[int]], params: SamplingParams) -> list[Sequence]:
        if params.n < 1 or params.max_new_tokens < 1:
            raise ValueError(f"n ({params.n}) and max_new_tokens ({params.max_new_tokens}) must be >= 1")
        longest = max((len(p) for p in prompts), default=0)
        self._check_fits(longest, params.max_new_tokens)
        seed = params.seed if params.seed is not None else self._unseeded_call_seed()
        stop_ids = stop_token_set(self.eos_ids, params)
        spec = sampling_spec(params)  # one object for every row: the sampler's all-same fast path
        hashes: list[list[bytes]] = [[] for _ in prompts]  # one prefix-hash cache per prompt, shared by its n samples
        samples = ((p, h) for p, h in zip(prompts, hashes) for _ in range(params.n))
        return [Sequence(row, p, params.max_new_tokens, row_key(seed, params.row_offset + row), stop_ids, h,
                         sampling=spec) for row, (p, h) in enumerate(samples)]

    def _unseeded_call_seed(self) -> int:
        """An unseeded call (or request) samples with the engine's seed plus a count of such calls."""
        self.num_calls += 1
        return self.seed + self.num_calls - 1

    # --- the request API ------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> None:
        """Queue one request (token ids in; `params.n` must be 1). It joins the running batch at the next step.

        Its sampling noise is keyed by (params.seed, params.row_offset) and each token's absolute position:
        the same pair gives the tokens of that row of a batch call with that seed, and a resumed request
        (`rollout.base.resume_request`) continues exactly. Give every trajectory its own row_offset (equal
        keys sample equal tokens). Unseeded requests get a fresh key each (not resumable exactly)."""
        self.submit_request(self.make_request(request_id, prompt_ids, params))

    def make_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> Sequence:
        """Check a request and build its sequence, prompt block hashes included, without touching the running
        batch: the asyncio front end does this on its caller's thread while a step runs. `submit_request`
        queues it."""
        check_request(params, len(prompt_ids), self.max_model_len, request_id)
        # A request may ask for more than the model's length: it stops there (stop_reason `length`).
        max_new_tokens = min(params.max_new_tokens, self.max_model_len - len(prompt_ids))
        self._check_fits(len(prompt_ids), max_new_tokens)
        seed, row = (params.seed, params.row_offset) if params.seed is not None else (self._unseeded_call_seed(), 0)
        prompt = array("q", prompt_ids)  # packed once: the hashes and the sequence read it (sequence.py)
        hashes = (prompt_hash_chain(prompt, self.block_size, self.resumed_chains.take(prompt))
                  if self.enable_prefix_caching else [])
        return Sequence(row, prompt, max_new_tokens, row_key(seed, row), stop_token_set(self.eos_ids, params), hashes,
                        sampling=sampling_spec(params), request_id=request_id, cache_on_finish=True)

    def submit_request(self, seq: Sequence) -> None:
        """Queue a sequence from `make_request`; it joins the running batch at the next step."""
        core = self._awake_core("submit_request")
        if seq.request_id is None or seq.request_id in self.requests:
            raise ValueError(f"request {seq.request_id!r} is already in flight; request ids must be unique")
        self._check_fits(seq.num_prompt_tokens, seq.max_new_tokens)  # the cache may have shrunk since
        self.requests[seq.request_id] = seq
        core.add(seq)

    def abort_request(self, request_id: str) -> TokenOutput | None:
        """Stop a request: what it generated so far (stop_reason `abort`), or None when it is not in flight."""
        seq = self.requests.pop(request_id, None)
        if seq is None:
            return None
        assert self.core is not None, "a request in flight without the step loop"
        self.core.abort(seq)
        self.resumed_chains.remember(seq)
        return token_output(seq)

    def step(self) -> list[tuple[str, TokenOutput]]:
        """One engine step (a prefill, or one decode burst read); the requests that finished in it."""
        finished = self._awake_core("step").step()
        return [(seq.request_id, token_output(self.requests.pop(seq.request_id)))
                for seq in finished if seq.request_id is not None]

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def take_metrics(self) -> dict[str, float]:
        """The request API's rollout/* metrics since the last take (prefill and decode time, preemptions,
        `rollout/prefix_cache_hit_tokens`, `rollout/prefill_tokens`, ...); batch calls report their own."""
        if self.core is None:
            return {}
        return self.core.take_stats().metrics(self.num_kv_blocks)

    def request_engine(self) -> AsyncLLMEngine:
        """The asyncio front end (rollout.base.RequestEngine) over this engine; one per engine."""
        if self._async_engine is None:
            self._async_engine = AsyncLLMEngine(self)
        return self._async_engine

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


def freeze_startup_heap() -> None:
    """Take every object alive now (the models, the trainer's and the engine's start-up state) out of the
    collector's reach. Generation is a host-bound loop that allocates many small objects (token lists,
    requests of every agent turn); each full collection then walked the whole start-up heap as well, a pause
    of 0.15 s on a CPU run of benchmarks/multiturn_bench.py (benchmarks/host_timeline.py measures them).
    vLLM freezes its start-up heap the same way. Garbage is collected first, so none is kept."""
    gc.collect()
    gc.freeze()
