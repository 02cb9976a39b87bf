"""verl's generative reward model (config/genrm.py): the reward model as a causal LM served by hybridrl's engine on
loopback, for the custom reward function to query with the `reward_router_address` and `reward_model_tokenizer`
it is given.

Placement, in the hybrid engine's spirit: the GenRM runs in the controller's process, one engine replica per GPU
of `reward_model.device_ids` (null: one on the controller's device, shared with training and the rollout engine);
each request goes to the replica with the fewest in flight. On a GPU a replica is the `hybrid` engine, whose KV
cache takes `reward_model.rollout.gpu_memory_utilization` of its device less its weights, and with
`free_cache_engine` (verl's default) is freed after each step's scoring, so training gets the memory back; on a
CPU it is the `hf` backend (one request at a time).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from contextlib import contextmanager
from typing import Any, Iterator

import torch

from hybridrl.config.errors import ConfigError
from hybridrl.config.genrm import GenRMSettings, genrm_backend, genrm_settings
from hybridrl.config.role_devices import placed_roles
from hybridrl.config.schema import HybridRLConfig
from hybridrl.logging.log import get_logger
from hybridrl.serving.generate_server import GenerateApp, GenerateServer
from hybridrl.serving.limits import ServeLimits

log = get_logger("rewards")
MAX_HANDLER_THREADS = 256  # requests generating at once (each waits on one front thread); more queue
FALLBACK_CONTEXT = 4096  # verl's reward-loop prompt_length + response_length
MAX_CONNECTIONS = 1024  # above rewards.async_rows.MAX_CONCURRENT_ROWS: the trainer's own scoring is never refused


def genrm_devices(cfg: HybridRLConfig, device: torch.device) -> list[torch.device]:
    """One engine replica per GPU of reward_model.device_ids on CUDA, else one on the controller's device."""
    if device.type != "cuda":
        return [device]
    ids = cfg.reward_model.device_ids
    return [torch.device("cuda", i) for i in ids] if ids else [torch.device("cuda", device.index or 0)]


def cache_follows_the_phase(settings: GenRMSettings, devices: list[torch.device], cfg: HybridRLConfig
                            ) -> GenRMSettings:
    """`free_cache_engine=False` keeps the GenRM's KV cache between scorings: right on GPUs of its own (verl's
    resource pool), but on a GPU the training roles use it would hold that memory through the update. There the
    cache is freed after each step's scoring anyway, with one warning naming how to keep it."""
    if settings.free_cache_engine or devices[0].type != "cuda":
        return settings
    num_devices = cfg.trainer.n_gpus_per_node or torch.cuda.device_count()  # null: every visible GPU
    training = {i for role in placed_roles(cfg, num_devices) for i in role.devices}
    shared = sorted(d.index for d in devices if d.index in training)
    if not shared:
        return settings
    log.warning("reward_model.rollout.free_cache_engine=False: the generative reward model shares GPU(s) %s with "
                "training, so its KV cache is freed after each step's scoring anyway (kept, it would hold "
                "reward_model.rollout.gpu_memory_utilization of the device through the update); give it GPUs of "
                "its own with reward_model.device_ids to keep the cache between steps", shared)
    return dataclasses.replace(settings, free_cache_engine=True)


def context_length(max_model_len: int | None, positions: int | None) -> int:
    """Prompt + output tokens of one request, as verl's vLLM/SGLang servers size it: `max_model_len`, null = the
    model's max_position_embeddings (FALLBACK_CONTEXT when the config has none); more than the positions is refused."""
    if max_model_len is not None and positions is not None and max_model_len > positions:
        raise ConfigError(f"reward_model.rollout.max_model_len={max_model_len} is more than the reward model's "
                          f"{positions} positions (max_position_embeddings); leave it null or lower it")
    return max_model_len or positions or FALLBACK_CONTEXT


class GenRMService:
    """The served GenRM: `offered_kwargs` for the reward function, `scoring()` around each step's scoring
    (wakes the engine's KV cache, frees it after with free_cache_engine, times it), `take_metrics()`, `close()`."""

    def __init__(self, cfg: HybridRLConfig, device: torch.device) -> None:
        from hybridrl.models.hf import import_external_lib, load_tokenizer

        rm = cfg.reward_model
        self.devices = genrm_devices(cfg, device)
        self.settings = cache_follows_the_phase(genrm_settings(rm.rollout), self.devices, cfg)
        import_external_lib(rm.model.external_lib, "reward_model.model.external_lib")
        # two instances: the function's and the server's (an HF fast tokenizer used from two threads at once can
        # fail with "Already borrowed")
        self.tokenizer, server_tokenizer = (load_tokenizer(rm.model.path, key="reward_model.model.path",
                                                           trust_remote_code=rm.model.trust_remote_code)
                                            for _ in range(2))
        self.backends, max_model_len, vocab_size = self._build_backends(cfg)
        self.settings_note = (f"{type(self.backends[0]).__name__} on {', '.join(map(str, self.devices))}, "
                              f"max_model_len={max_model_len}")
        app = GenerateApp([backend.request_engine() for backend in self.backends], server_tokenizer, rm.model.path,
                          max_model_len, vocab_size)
        limits = ServeLimits(workers=min(self.settings.max_num_seqs, MAX_HANDLER_THREADS),
                             max_connections=MAX_CONNECTIONS, request_timeout_s=60.0)
        self.server = GenerateServer(app, limits).start()
        self.address = self.server.address
        self.scoring_s = 0.0
        if self.settings.free_cache_engine:
            try:
                self._each_backend("sleep")  # until the first step's scoring (verl's RewardModelManager sleeps too)
            except BaseException:
                self.server.close()
                raise

    def _build_backends(self, cfg: HybridRLConfig) -> tuple[list[Any], int, int]:
        """One backend per device, from one CPU copy of the model: the hybrid engine copies the weights onto its
        device; the hf backend generates with the module itself (a copy of it per device)."""
        from hybridrl.models.hf import load_causal_lm, resolve_dtype
        from hybridrl.rollout import build_rollout_backend, resolve_backend_name

        rm, settings = cfg.reward_model, self.settings
        backend_name = resolve_backend_name(genrm_backend(rm.rollout), self.devices[0].type)
        on_engine = backend_name == "hybrid"  # it copies the weights onto its device; hf generates with the module
        on_cuda = self.devices[0].type == "cuda"
        model = load_causal_lm(rm.model.path, dtype=resolve_dtype(settings.dtype) if on_cuda else torch.float32,
                               override_config=dict(rm.model.override_config or {}),
                               trust_remote_code=rm.model.trust_remote_code, key="reward_model.model.path",
                               use_shm=rm.model.use_shm)
        model.requires_grad_(False).eval()
        max_model_len = context_length(settings.max_model_len, getattr(model.config, "max_position_embeddings", None))
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [self.tokenizer.eos_token_id])
        engine_cfg = _EngineSettings(settings, max_model_len)
        sources = [model if on_engine or index == 0 else copy.deepcopy(model) for index in range(len(self.devices))]
        backends = [build_rollout_backend(backend_name, source if on_engine else source.to(device),
                                          pad_token_id=self.tokenizer.pad_token_id, eos_token_ids=eos_ids,
                                          rollout_cfg=engine_cfg, device_type=device.type, device=device)
                    for source, device in zip(sources, self.devices)]
        return backends, max_model_len, model.config.vocab_size

    def _each_backend(self, method: str) -> None:
        for backend in self.backends:
            getattr(backend, method)()

    @property
    def offered_kwargs(self) -> dict[str, Any]:
        """What verl passes a custom reward function when a reward model is served."""
        return {"reward_router_address": self.address, "reward_model_tokenizer": self.tokenizer}

    def describe(self) -> str:
        return f"generative reward model served at http://{self.address} ({self.settings_note})"

    @contextmanager
    def scoring(self) -> Iterator[None]:
        """Around one step's scoring: the KV cache allocated before, requests left over aborted and the cache freed
        after (free_cache_engine), the time taken counted in reward_model/genrm/scoring_s."""
        started = time.monotonic()
        if self.settings.free_cache_engine:
            self._each_backend("wake_up")
        try:
            yield
        finally:
            self.server.app.abort_all()  # a reward call that timed out may have left its request generating
            if self.settings.free_cache_engine:
                self._each_backend("sleep")
            self.scoring_s += time.monotonic() - started

    def take_metrics(self) -> dict[str, float]:
        metrics = self.server.app.stats.take()
        metrics["reward_model/genrm/scoring_s"], self.scoring_s = self.scoring_s, 0.0
        return metrics

    def close(self) -> None:
        """Stop the server, its threads and the engine's (safe to call twice)."""
        self.server.close()


class _EngineSettings:
    """GenRMSettings as the `rollout_cfg` that `build_rollout_backend` reads (actor_rollout_ref.rollout's names)."""

    def __init__(self, settings: GenRMSettings, max_model_len: int) -> None:
        self.__dict__.update(vars(settings))
        self.max_model_len = max_model_len
        self.seed = settings.seed if settings.seed is not None else 0
        self.recompute_kv_cache_after_weight_updates = True  # a GenRM's weights never change: nothing is parked
