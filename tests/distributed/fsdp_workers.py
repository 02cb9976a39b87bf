"""An FSDP2 training worker for the distributed tests (importable, so spawned ranks can unpickle it)."""

from __future__ import annotations

import torch

from hybridrl.distributed.fsdp import (
    apply_fsdp2,
    clip_grad_norm_,
    full_state_dict,
    iter_full_params,
    load_full_state_dict,
)
from hybridrl.models.tiny import build_tiny_model
from hybridrl.utils.batch import Batch

LR = 0.5
MAX_NORM = 1.0


def sgd_step(model: torch.nn.Module, input_ids: torch.Tensor, clip=torch.nn.utils.clip_grad_norm_) -> float:
    """One SGD step on the mean next-token loss, gradients clipped to MAX_NORM; returns the grad norm."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loss = model(input_ids=input_ids, labels=input_ids).loss
    loss.backward()
    grad_norm = float(clip(model, MAX_NORM) if clip is clip_grad_norm_ else clip(model.parameters(), MAX_NORM))
    optimizer.step()
    optimizer.zero_grad()
    return grad_norm


def _torch_clip(model: torch.nn.Module, max_norm: float):
    norm = torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm)
    return norm.full_tensor()


class FSDPWorker:
    def __init__(self, seed: int = 0, **config) -> None:
        self.model = apply_fsdp2(build_tiny_model(seed=seed, **config))

    def train_step(self, batch: Batch) -> dict:
        return {"grad_norm": sgd_step(self.model, batch["input_ids"], clip=clip_grad_norm_)}

    def state(self, rank0_only: bool = True) -> dict:
        return full_state_dict(self.model, rank0_only=rank0_only)

    def full_params(self, dtype: torch.dtype | None = None) -> dict:
        return {name: tensor.clone() for name, tensor in iter_full_params(self.model, dtype)}

    def full_params_one_at_a_time(self) -> dict:
        """The reference for iter_full_params: DTensor.full_tensor per parameter."""
        return {name: param.detach().full_tensor().clone() for name, param in self.model.named_parameters()}

    def load_from_rank0(self, state: dict) -> None:
        """Only rank 0 passes the state; the others receive it by broadcast."""
        load_full_state_dict(self.model, state if torch.distributed.get_rank() == 0 else {}, from_rank0=True)

    def clip_both_ways(self, max_norm: float) -> dict:
        """The same gradients clipped by `clip_grad_norm_` (local shards) and by torch's DTensor clip: norms
        and the clipped full gradients of each."""
        out = {}
        for label, clip in (("local_shards", clip_grad_norm_), ("torch", _torch_clip)):
            self._set_known_grads()
            norm = float(clip(self.model, max_norm))
            out[label] = (norm, {n: p.grad.full_tensor().clone() for n, p in self.model.named_parameters()})
        return out

    def _set_known_grads(self) -> None:
        from torch.distributed.tensor import distribute_tensor

        generator = torch.Generator().manual_seed(7)
        for param in self.model.parameters():  # same full gradient on every rank, then sharded like the param
            full = torch.randn(param.shape, generator=generator)
            param.grad = distribute_tensor(full, param.device_mesh, param.placements)

    def num_local_elements(self) -> int:
        return sum(p.to_local().numel() for p in self.model.parameters())


class RankProbe:
    """What a rank sees of its set-up: FSDP units after `parallelize`, and its process group's timeout."""

    def units_resharding_after_forward(self, reshard_after_forward: bool) -> list[bool]:
        from types import SimpleNamespace

        from hybridrl.workers.parallel import parallelize
        from hybridrl.workers.precision import resolve_precision

        model = build_tiny_model(seed=0)
        fsdp_cfg = SimpleNamespace(fsdp_size=-1, reshard_after_forward=reshard_after_forward, offload_policy=False,
                                   model_dtype="fp32", dtype="bf16", mixed_precision={})
        strategy = parallelize(model, fsdp_cfg, resolve_precision(fsdp_cfg, "cpu", "fsdp_config"), "probe")
        assert strategy.name == "FSDP2"
        return [layer._get_fsdp_state()._fsdp_param_group.post_forward_mesh_info is not None
                for layer in model.model.layers]

    def collective_timeout_s(self) -> float:
        backend = torch.distributed.group.WORLD._get_backend(torch.device("cpu"))
        return backend.options._timeout.total_seconds()


class MixedPrecisionLogits:
    """A tiny fp32 model sharded with FSDP2 computing in bf16 (`param_dtype`), optionally sharing the rollout
    engine's fp32 residual stream (models/numerics.py), and its logits for given token ids."""

    def __init__(self, seed: int = 0, fp32_residual: bool = True, **config) -> None:
        from hybridrl.models.numerics import keep_residual_stream_fp32

        model = build_tiny_model(seed=seed, **config)
        if fp32_residual:
            keep_residual_stream_fp32(model)
        self.model = apply_fsdp2(model, param_dtype=torch.bfloat16)

    @torch.no_grad()
    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids).logits.float()
