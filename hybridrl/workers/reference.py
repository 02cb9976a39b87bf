"""The reference policy role: a frozen copy of the initial policy, used for KL loss or KL-in-reward."""

from __future__ import annotations

import torch

from hybridrl.models.hf import load_causal_lm, resolve_dtype
from hybridrl.utils.batch import Batch
from hybridrl.workers.forward import batched_log_probs
from hybridrl.workers.offload import PhaseOffloader
from hybridrl.workers.sharding import shard_model


class ReferenceWorker:
    def __init__(self, cfg, micro_batch_size: int, device: torch.device):
        model_cfg = cfg.actor_rollout_ref.model
        ref_cfg = cfg.actor_rollout_ref.ref
        path = getattr(getattr(ref_cfg, "model", None), "path", None) or model_cfg.path
        self.model = load_causal_lm(path, dtype=resolve_dtype(ref_cfg.fsdp_config.model_dtype),
                                    override_config=model_cfg.override_config,
                                    trust_remote_code=model_cfg.trust_remote_code,
                                    key="actor_rollout_ref.model.path").to(device)
        self.model.requires_grad_(False).eval()
        shard_model(self.model, log_prob_forward=True)  # FSDP2 when running as a rank
        self.micro_batch_size = micro_batch_size
        self.device = device
        # ref.fsdp_config.param_offload: parameters live on the CPU between this role's forwards.
        self.offloader = PhaseOffloader(self.model, None, device, ref_cfg.fsdp_config.param_offload, False)

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        with self.offloader.for_compute():
            log_probs, _ = batched_log_probs(self.model, batch.to(self.device), self.micro_batch_size,
                                             batch.meta["temperature"], compute_entropy=False)
        return Batch({"ref_log_prob": log_probs.cpu()})


class LoraReferenceWorker:
    """With LoRA the reference policy is the actor's base model: the same module, adapter disabled
    (no second copy of the weights). Phases run one after another, so sharing the module is safe."""

    def __init__(self, actor, micro_batch_size: int):
        self.actor = actor
        self.micro_batch_size = micro_batch_size

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        from hybridrl.models.lora import reference_forward_context

        model = self.actor.model
        model.eval()
        with self.actor.offloader.for_compute(), reference_forward_context(model):
            log_probs, _ = batched_log_probs(model, batch.to(self.actor.device), self.micro_batch_size,
                                             batch.meta["temperature"], compute_entropy=False)
        return Batch({"ref_log_prob": log_probs.cpu()})
