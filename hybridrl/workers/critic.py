"""The critic role: a value head on an HF backbone (`critic.model.path`), its optimizer and update."""

from __future__ import annotations

from collections import defaultdict

import torch

from hybridrl.algorithms import compute_value_loss, masked_mean
from hybridrl.config.batch_sizes import BatchSizes
from hybridrl.config.schema import HybridRLConfig
from hybridrl.models.hf import import_external_lib, load_value_model
from hybridrl.utils.batch import Batch
from hybridrl.utils.nsight import nvtx_range
from hybridrl.workers.forward import response_values
from hybridrl.workers.loss_scope import MicroBatchWeights
from hybridrl.workers.micro_batches import MicroBatchPlan
from hybridrl.workers.nonfinite import NonFiniteTrace, SkippedSteps
from hybridrl.workers.trainable import RoleSpec, TrainState, build_trainable
from hybridrl.workers.update_metrics import as_metric, means

UPDATE_KEYS = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask", "values", "returns")


class CriticWorker(TrainState):
    def __init__(self, cfg: HybridRLConfig, sizes: BatchSizes, device: torch.device, total_training_steps: int):
        self.cfg = cfg.critic
        self.sizes = sizes
        self.device = device
        model_cfg = self.cfg.model

        def load(master: torch.dtype, on: torch.device) -> torch.nn.Module:
            import_external_lib(model_cfg.external_lib, "critic.model.external_lib")
            return load_value_model(model_cfg.path or cfg.actor_rollout_ref.model.path, dtype=master,
                                    override_config=model_cfg.override_config,
                                    trust_remote_code=model_cfg.trust_remote_code,
                                    use_shm=model_cfg.use_shm).to(on)  # a fresh value head

        super().__init__(build_trainable(RoleSpec.critic(cfg), device, load, total_training_steps))
        self.remove_padding = model_cfg.use_remove_padding
        self.values_plan = MicroBatchPlan.for_phase(cfg, "values", sizes.critic_forward_micro)
        self.update_plan = MicroBatchPlan.for_phase(cfg, "update_critic", sizes.critic_micro)

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> Batch:
        self.model.eval()
        micro_batches = self.values_plan.split(batch.to(self.device), self.parallel.max_over_ranks)
        with self.offloader.for_compute(), self.parallel.autocast():
            values = [response_values(self.model, micro, self.remove_padding) for micro in micro_batches.parts]
        return Batch({"values": micro_batches.restore(torch.cat(values)).cpu()})

    def update_critic(self, batch: Batch) -> dict[str, float]:
        self.model.train()
        data = batch.select(UPDATE_KEYS).to(self.device)
        metrics: dict[str, list[torch.Tensor | float]] = defaultdict(list)
        skipped = SkippedSteps("critic")
        with self.offloader.for_update():
            for epoch in range(self.cfg.ppo_epochs):
                if self.cfg.shuffle:
                    gen = torch.Generator().manual_seed(self.cfg.data_loader_seed + epoch)
                    data = data.index(torch.randperm(len(data), generator=gen))
                for mini in data.split(self.sizes.critic_mini):
                    self._update_mini_batch(mini, metrics, skipped)
        skipped.step_scheduler(self.lr_scheduler)
        out = means(metrics) | skipped.metrics()
        out["critic/lr"] = self.optimizer.param_groups[0]["lr"]
        return out

    def _update_mini_batch(self, mini: Batch, metrics: dict[str, list[torch.Tensor | float]],
                           skipped: SkippedSteps) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        parts = self.update_plan.split(mini, self.parallel.max_over_ranks).parts
        weights = MicroBatchWeights(self.cfg.loss_agg_scope, mini, self.sequence_parallel)
        mini_metrics = defaultdict(list)  # weighted micro-batch parts: their sum is the mini-batch's value
        trace = NonFiniteTrace()
        for index, micro in enumerate(parts):
            mask = micro["response_mask"]
            last = index == len(parts) - 1  # one gradient reduce per mini-batch, in its last backward
            with self.parallel.backward_sync(last), self.saved_activations():  # enable_activation_offload
                with nvtx_range("critic/forward"), self.parallel.autocast():  # NVTX: tool=nsys only
                    vpreds = response_values(self.model, micro, self.remove_padding)
                vf_loss, vf_clipfrac = compute_value_loss(vpreds, micro["returns"], micro["values"], mask,
                                                          self.cfg.cliprange_value, self.cfg.loss_agg_mode)
                vf_loss = vf_loss * weights(mask, self.cfg.loss_agg_mode)
                trace.note("vpreds", vpreds, mask)
                trace.note("vf_loss", vf_loss)
                with nvtx_range("critic/backward"):
                    vf_loss.backward()
            token_weight = weights(mask, "token-mean")
            mini_metrics["critic/vf_loss"].append(as_metric(vf_loss))
            mini_metrics["critic/vf_clipfrac"].append(as_metric(vf_clipfrac * token_weight))
            mini_metrics["critic/vpred_mean"].append(as_metric(masked_mean(vpreds, mask) * token_weight))
        for key, values in mini_metrics.items():
            metrics[key].append(sum(values))
        grad_norm = self.step(self.cfg.grad_clip)
        skipped.record(grad_norm, trace)
        metrics["critic/grad_norm"].append(as_metric(grad_norm))

