"""The reference policy role: a frozen copy of the initial policy, used for KL loss or KL-in-reward."""

from __future__ import annotations

import torch

from hybridrl.models.hf import load_causal_lm, resolve_dtype
from hybridrl.utils.batch import Batch
from hybridrl.workers.forward import batched_log_probs
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

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        log_probs, _ = batched_log_probs(self.model, batch.to(self.device), self.micro_batch_size,
                                         batch.meta["temperature"], compute_entropy=False)
        return Batch({"ref_log_prob": log_probs.cpu()})
