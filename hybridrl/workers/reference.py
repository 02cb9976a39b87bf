"""The reference policy role: a frozen copy of the initial policy, used for KL loss or KL-in-reward."""

from __future__ import annotations

import torch

from hybridrl.config.schema import HybridRLConfig
from hybridrl.models.hf import load_causal_lm
from hybridrl.utils.batch import Batch
from hybridrl.workers.forward import batched_log_probs
from hybridrl.workers.micro_batches import MicroBatchPlan
from hybridrl.workers.trainable import RoleSpec, build_frozen


class ReferenceWorker:
    def __init__(self, cfg: HybridRLConfig, micro_batch_size: int, device: torch.device):
        model_cfg = cfg.actor_rollout_ref.model
        ref_cfg = cfg.actor_rollout_ref.ref
        path = getattr(getattr(ref_cfg, "model", None), "path", None) or model_cfg.path

        def load(master: torch.dtype, on: torch.device) -> torch.nn.Module:
            return load_causal_lm(path, dtype=master, override_config=model_cfg.override_config,
                                  trust_remote_code=model_cfg.trust_remote_code,
                                  key="actor_rollout_ref.model.path", use_shm=model_cfg.use_shm,
                                  fp32_residual=model_cfg.fp32_residual_stream,
                                  batch_invariant=model_cfg.batch_invariant).to(on)

        # ref.fsdp_config.param_offload: parameters live on the CPU between this role's forwards.
        frozen = build_frozen(RoleSpec.reference(cfg), device, load)
        self.model, self.parallel, self.offloader = frozen.model, frozen.parallel, frozen.offloader
        self.plan = MicroBatchPlan.for_phase(cfg, "ref", micro_batch_size)
        self.remove_padding = model_cfg.use_remove_padding  # verl's ref follows the model's switch
        self.device = device

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        with self.offloader.for_compute(), self.parallel.autocast():
            micro_batches = self.plan.split(batch.to(self.device), self.parallel.max_over_ranks)
            log_probs, _ = batched_log_probs(self.model, micro_batches, batch.meta["temperature"],
                                             compute_entropy=False, remove_padding=self.remove_padding)
        return Batch({"ref_log_prob": log_probs.cpu()})


class LoraReferenceWorker:
    """With LoRA the reference policy is the actor's base model: the same module, adapter disabled
    (no second copy of the weights). Phases run one after another, so sharing the module is safe.
    Precision and padding removal are the actor's; micro-batches follow the `ref.*` keys."""

    def __init__(self, actor, micro_batch_size: int):
        self.actor = actor
        self.plan = MicroBatchPlan.for_phase(actor.cfg, "ref", micro_batch_size)

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        from hybridrl.models.lora import reference_forward_context

        actor = self.actor
        actor.model.eval()
        with actor.offloader.for_compute(), reference_forward_context(actor.model), actor.parallel.autocast():
            micro_batches = self.plan.split(batch.to(actor.device), actor.parallel.max_over_ranks)
            log_probs, _ = batched_log_probs(actor.model, micro_batches, batch.meta["temperature"],
                                             compute_entropy=False, remove_padding=actor.remove_padding)
        return Batch({"ref_log_prob": log_probs.cpu()})


def build_reference(cfg: HybridRLConfig, actor, micro_batch_size: int, device: torch.device):
    """The frozen initial policy: with LoRA on `actor` (this process's, else None), its base model with the
    adapter disabled (no second copy of the weights; on the actor's sequence-parallel groups, which the config
    rules make the reference's too); otherwise a frozen copy loaded from the model path."""
    if actor is not None and actor.lora:
        return LoraReferenceWorker(actor, micro_batch_size)
    return ReferenceWorker(cfg, micro_batch_size, device)

