"""The rollout role: turn a batch of prompts into prompt+response rows with verl's batch keys."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import cast

import numpy as np
import torch

from hybridrl.config.errors import ConfigError
from hybridrl.config.run_plan import RunPlan
from hybridrl.config.schema import HybridRLConfig
from hybridrl.models.hf import resolve_dtype
from hybridrl.rollout import SamplingParams, build_rollout_backend
from hybridrl.rollout.agent.trainer_rows import AGENT_LOOP_META, AgentLoopRouting, RankAgentLoops
from hybridrl.rollout.engine.parallel import TensorParallel
from hybridrl.utils.batch import Batch
from hybridrl.utils.metrics import timed
from hybridrl.workers.request_pool import FinishedGroup, GroupRequest, RequestCore, RequestPool


def sampling_params(rollout_cfg, *, validate: bool, greedy: bool = False, seed: int | None = None,
                    eos_token_ids=()) -> SamplingParams:
    """Sampling settings from `rollout.*` (training) or `rollout.val_kwargs.*` (validation)."""
    src = rollout_cfg.val_kwargs if validate else rollout_cfg
    do_sample = False if greedy else src.do_sample
    return SamplingParams(
        temperature=src.temperature, top_k=src.top_k, top_p=src.top_p, do_sample=do_sample,
        n=1 if greedy else src.n, max_new_tokens=rollout_cfg.response_length,
        ignore_eos=rollout_cfg.ignore_eos, eos_token_ids=tuple(eos_token_ids), seed=seed)


def rollout_weights_dtype(cfg: HybridRLConfig, backend: str) -> torch.dtype:
    """The dtype a rollout replica holds its weights in, so a weight handoff sends no more bytes than it
    keeps: our engine's (`backend` "hybrid") `rollout.dtype`; the hf backend generates with a plain copy of
    the model loaded in the actor's `fsdp_config.model_dtype` (it ignores `rollout.dtype`)."""
    arr = cfg.actor_rollout_ref
    if backend == "hybrid":
        return resolve_dtype(arr.rollout.dtype)
    return resolve_dtype(arr.actor.fsdp_config.model_dtype)


def _right_pad(rows: list[list], width: int, value, dtype) -> torch.Tensor:
    """(len(rows), width) with each row's values first, `value` after; one array construction, not one per row
    (numpy reads nested Python lists 2-4x faster than torch.tensor: 512 x 256 tokens and log-probs, 9-17 ms
    against 31-35 ms on a 2-core box)."""
    if any(len(row) > width for row in rows):
        raise ValueError(f"a generated row has {max(map(len, rows))} entries, more than the response length {width}")
    padded = np.array([row + [value] * (width - len(row)) for row in rows], dtype=torch.empty(0, dtype=dtype).numpy().dtype)
    return torch.from_numpy(padded.reshape(len(rows), width))


def unpadded_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    """Each row's tokens where its mask is set, as lists: one masked select for the batch, not one per row
    (256 rows: 12 ms of per-row index/nonzero calls on an H200 host)."""
    mask = attention_mask.bool()
    flat = input_ids[mask].tolist()
    ends = mask.sum(dim=1).cumsum(0).tolist()
    return [flat[start:end] for start, end in zip([0] + ends[:-1], ends)]


def assemble(prompts: Batch, token_ids: list[list[int]], log_probs: list[list[float]], n: int,
             response_length: int, pad_token_id: int) -> Batch:
    """Repeat prompt rows n times (interleaved) and add responses, masks, positions, rollout log-probs."""
    batch = prompts.repeat(n, interleave=True)
    responses = _right_pad(token_ids, response_length, pad_token_id, torch.long)
    lengths = torch.tensor([len(t) for t in token_ids], dtype=torch.long)
    response_mask = (torch.arange(response_length) < lengths.unsqueeze(1)).long()
    prompt_positions = batch["position_ids"]
    steps = torch.arange(1, response_length + 1).unsqueeze(0)
    batch["prompts"] = batch["input_ids"]
    batch["responses"] = responses
    batch["response_mask"] = response_mask
    batch["rollout_log_probs"] = _right_pad(log_probs, response_length, 0.0, torch.float32)
    batch["input_ids"] = torch.cat([batch["input_ids"], responses], dim=1)
    batch["attention_mask"] = torch.cat([batch["attention_mask"], response_mask], dim=1)
    batch["position_ids"] = torch.cat([prompt_positions, prompt_positions[:, -1:] + steps], dim=1)
    return batch


class RolloutWorker:
    """`model` is the actor's own module (whole on this device: the hf backend generates with it, so weight sync
    is free; our engine is built from it), or with `replica=True` a private plain copy (a rank whose actor is
    sharded or elsewhere): the hf backend generates with the copy and `sync_weights` copies the gathered
    weights into it. `plan.rollout_backend` names the backend."""

    def __init__(self, cfg: HybridRLConfig, plan: RunPlan, model, tokenizer, *, replica: bool = False,
                 model_context: Callable[[], AbstractContextManager] | None = None, tp: TensorParallel | None = None):
        self.cfg = cfg.actor_rollout_ref.rollout
        self.pad_token_id = tokenizer.pad_token_id
        self.eos_token_ids = _eos_ids(tokenizer, model)
        self.weights_dtype = rollout_weights_dtype(cfg, plan.rollout_backend)  # what `sync_weights` keeps of a tensor
        self.backend = build_rollout_backend(plan.rollout_backend, model, pad_token_id=self.pad_token_id,
                                             eos_token_ids=self.eos_token_ids, rollout_cfg=self.cfg,
                                             device_type=plan.device, tp=tp,
                                             fp32_residual=cfg.actor_rollout_ref.model.fp32_residual_stream,
                                             batch_invariant=cfg.actor_rollout_ref.model.batch_invariant)
        hf = plan.rollout_backend == "hf"  # generates with a module it is given: no engine, no KV cache to free
        self.replica = model if replica and hf else None
        # The hf backend generating with the actor's own module needs its parameters present
        # (actor param_offload): `model_context` is the actor's `offloader.for_compute`.
        shares_module = hf and self.replica is None
        self.model_context = model_context if shares_module and model_context is not None else nullcontext
        # rollout.free_cache_engine (verl, default true): the engine's KV cache exists only while generating.
        self.free_cache = self.cfg.free_cache_engine and not hf
        self.asleep = False  # the engine's KV cache is freed (free_cache_engine, or parked request-level groups)
        if self.free_cache:
            self.sleep()
        self.pool: RequestPool | None = None  # request-level generation (asynchronous training), made on first use
        # Agent loops (multi-turn, tools) over the backend's request API: built now when the config asks for them
        # (tools load, and fail, at start-up), else on the first batch whose rows name a loop.
        self._agent_loop_inputs = (cfg, tokenizer, _model_type(model, cfg), tp.size if tp is not None else 1)
        self.agent_loops: RankAgentLoops | None = None
        if AgentLoopRouting.from_config(self.cfg).configured:
            self._agents()

    def generate_sequences(self, prompts: Batch, params: SamplingParams) -> tuple[Batch, dict[str, float]]:
        if prompts.meta.get(AGENT_LOOP_META):
            return self._generate_with_agent_loops(prompts, params)
        start = time.perf_counter()
        prompt_ids = unpadded_rows(prompts["input_ids"], prompts["attention_mask"])
        timings: dict[str, float] = {}
        with self.model_context(), self._kv_cache(timings), timed("timing_s/gen_engine", timings):
            out = self.backend.generate(prompt_ids, params)
        batch = assemble(prompts, out.token_ids, out.log_probs, params.n, self.cfg.response_length,
                         self.pad_token_id)
        batch.meta["temperature"] = params.temperature if not params.greedy else 1.0
        # Where a gen phase goes: the worker's wall time vs the engine's; timing_s/gen - gen_worker is transport.
        timings["timing_s/gen_worker"] = time.perf_counter() - start
        return batch, {**out.metrics, **timings}

    def _generate_with_agent_loops(self, prompts: Batch, params: SamplingParams) -> tuple[Batch, dict[str, float]]:
        """One row per trajectory (tool tokens masked out of response_mask), in the form the controller joins
        (rollout.agent.trainer_rows); the request engine's rollout/* metrics with the rank's timings."""
        start = time.perf_counter()
        agents = self._agents()
        timings: dict[str, float] = {}
        with self.model_context(), self._kv_cache(timings), timed("timing_s/gen_engine", timings):
            batch, metrics = agents.generate(prompts, params)
            take_engine_metrics = getattr(self.backend, "take_metrics", None)  # our engine's request-API stats
            engine_metrics = take_engine_metrics() if take_engine_metrics is not None else {}
        timings["timing_s/gen_worker"] = time.perf_counter() - start
        return batch, {**engine_metrics, **metrics, **timings}

    def _agents(self) -> RankAgentLoops:
        if self.agent_loops is None:
            cfg, tokenizer, model_type, tp_size = self._agent_loop_inputs
            if tp_size > 1:
                raise ConfigError(
                    f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp_size} with agent loops (multi_turn / "
                    "agent_name rows): the ranks of a tensor-parallel replica must step identically, which requests "
                    "that wait for tools at different times cannot promise; use tensor_model_parallel_size=1 (each "
                    "device then runs a replica of its own)")
            self.agent_loops = RankAgentLoops(cfg, self.backend.request_engine(), tokenizer, model_type)
        return self.agent_loops

    @contextmanager
    def _kv_cache(self, timings: dict[str, float]):
        """Allocate the KV cache for this generation and free it afterwards (free_cache_engine); records
        timing_s/gen_wake_up and timing_s/gen_sleep in `timings`."""
        if not self.free_cache:
            yield
            return
        with timed("timing_s/gen_wake_up", timings):
            self.wake_up()
        try:
            yield
        finally:
            with timed("timing_s/gen_sleep", timings):
                self.sleep()

    def sync_weights(self, named_tensors) -> None:
        if self.replica is not None:
            copy_weights(self.replica, named_tensors)
        else:
            self.backend.update_weights(named_tensors)

    def sleep(self) -> None:
        self.backend.sleep()
        self.asleep = True

    def wake_up(self) -> None:
        self.backend.wake_up()
        self.asleep = False

    # ---- request-level generation (asynchronous training: workers/request_pool.py,
    # trainer/batch_sources/async_*.py) ----
    def submit_groups(self, groups: list[GroupRequest], params: SamplingParams, version: int) -> None:
        """Start these prompt groups' samples now (they decode with whatever is in flight)."""
        if groups:
            pool = self._request_pool()
            if self.asleep:
                self.wake_up()
            pool.submit(groups, params, version)

    def advance_groups(self, max_steps: int, version: int) -> list[FinishedGroup]:
        """Resume parked samples at policy `version` and step the engine up to `max_steps` times; the groups
        that finished."""
        pool = self._request_pool()
        if not pool.num_in_flight:
            return []
        if self.asleep:
            self.wake_up()
        return pool.advance(max_steps, version)

    def park_groups(self, sleep: bool) -> dict[str, float]:
        """Abort the requests in flight keeping their tokens (the engine can then take new weights); with `sleep`
        (and free_cache_engine) free the KV cache for training, unless the parked requests keep their KV
        (recompute_kv_cache_after_weight_updates=false). The request API's rollout/* metrics since the last
        park."""
        if self.pool is None:
            return {}
        self.pool.park()
        metrics = self.pool.engine.take_metrics()
        keeps_kv = not self.cfg.recompute_kv_cache_after_weight_updates
        if sleep and self.free_cache and not keeps_kv and not self.asleep:
            self.sleep()
        return metrics

    def forget_groups(self, group_ids: list[str] | None = None) -> None:
        """Drop these groups (None: every group) from the pool, aborting what of them runs: a run restarting from a
        checkpoint re-issues them all, `drop` evicts running groups that can no longer meet the staleness bound."""
        if self.pool is not None:
            self.pool.forget(group_ids)

    def _request_pool(self) -> RequestPool:
        if self.pool is None:
            if not hasattr(self.backend, "make_request"):
                raise RuntimeError("asynchronous training needs the hybrid engine's request API; set "
                                   "actor_rollout_ref.rollout.name=hybrid (the hf backend runs one request at a time)")
            self.pool = RequestPool(cast(RequestCore, self.backend))
        return self.pool


@torch.no_grad()
def copy_weights(model: torch.nn.Module, named_tensors) -> None:
    """Copy (HF name, tensor) pairs into `model`'s parameters and buffers in place."""
    targets = dict(model.named_parameters())
    targets.update(model.named_buffers())
    for name, tensor in named_tensors:
        if name not in targets:
            raise KeyError(f"weight {name!r} has no counterpart in the rollout replica {type(model).__name__}")
        targets[name].copy_(tensor)


def _model_type(model, cfg: HybridRLConfig) -> str | None:
    """The policy's HF `model_type` (it picks the agent loops' turn-boundary rule): from the module, else (our
    engine built from a directory) from the model path's config."""
    config = getattr(model, "config", None)
    if config is not None:
        return getattr(config, "model_type", None)
    from transformers import AutoConfig

    model_cfg = cfg.actor_rollout_ref.model
    return AutoConfig.from_pretrained(model_cfg.path, trust_remote_code=model_cfg.trust_remote_code).model_type


def _eos_ids(tokenizer, model) -> tuple[int, ...]:
    """EOS ids from the tokenizer and every id in the model's generation config."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if gen_eos is not None:
        ids |= set(gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos])
    return tuple(sorted(ids))
