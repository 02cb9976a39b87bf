"""Rules of `actor_rollout_ref.model.batch_invariant` (models/invariant): what the shared kernels need.

Torch-free, so `print-config --validate` runs them."""

from __future__ import annotations

from hybridrl.config.roles import rollout_backend_name
from hybridrl.config.schema import HybridRLConfig

_KEY = "actor_rollout_ref.model.batch_invariant=true"


def batch_invariant_problems(cfg: HybridRLConfig) -> list[str]:
    """Messages naming each key to change; none with the mode off."""
    arr = cfg.actor_rollout_ref
    if not arr.model.batch_invariant:
        return []
    device = cfg.trainer.device
    checks = [
        (device in ("auto", "cuda"), f"trainer.device={device!r}: the kernels run on CUDA GPUs; set trainer.device=cuda, "
                                     "or batch_invariant=false"),
        (arr.model.fp32_residual_stream, "actor_rollout_ref.model.fp32_residual_stream=false: the shared numerics keep "
                                         "the residual stream in fp32 on both sides; set it to true"),
        (rollout_backend_name(cfg, "cuda") == "hybrid",
         f"actor_rollout_ref.rollout.name={arr.rollout.name!r}: only the hybrid engine runs the shared kernels; set "
         "actor_rollout_ref.rollout.name=hybrid"),
        (arr.rollout.tensor_model_parallel_size == 1,
         f"actor_rollout_ref.rollout.tensor_model_parallel_size={arr.rollout.tensor_model_parallel_size}: a "
         "tensor-parallel layer sums its ranks' partial products in the all-reduce's order, which the trainer does not "
         "share; set it to 1"),
        (arr.model.lora_rank == 0, f"actor_rollout_ref.model.lora_rank={arr.model.lora_rank}: the engine runs the merged "
                                   "weights, the trainer base + adapter, two different sums; set lora_rank=0"),
        (arr.actor.ulysses_sequence_parallel_size == 1,
         f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={arr.actor.ulysses_sequence_parallel_size}: "
         "attention split over ranks is not the engine's; set it to 1"),
    ]
    return [f"{_KEY} does not combine with {message}" for ok, message in checks if not ok]
