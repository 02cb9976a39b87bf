"""A tiny model's forward under Ulysses sequence parallelism on one gloo rank (importable, so spawned ranks can
unpickle it)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from hybridrl.models.tiny import build_tiny_model, tiny_config
from hybridrl.utils.batch import Batch
from hybridrl.workers.forward import response_stats, response_values
from hybridrl.workers.sequence_split import apply_sequence_parallel


def critic_model(seed: int, **config):
    from transformers import AutoModelForTokenClassification

    torch.manual_seed(seed)
    return AutoModelForTokenClassification.from_config(tiny_config(num_labels=1, **config)).eval()  # no dropout


def outputs_and_gradients(model: torch.nn.Module, batch: Batch, remove_padding: bool, critic: bool) -> dict:
    """Log-probs, entropies and Σπ² (or values) of `batch`, and the gradients of a loss over all of them."""
    responses = batch["responses"]
    weights = torch.linspace(-1.0, 2.0, responses.numel(), device=responses.device).view(responses.shape)
    if critic:
        outputs = {"values": response_values(model, batch, remove_padding=remove_padding)}
    else:
        stats = response_stats(model, batch, temperature=0.7, compute_entropy=True, compute_sum_pi_squared=True,
                               remove_padding=remove_padding)
        outputs = {"log_probs": stats.log_probs, "entropy": stats.entropy, "sum_pi_squared": stats.sum_pi_squared}
    loss = sum((value * weights * batch["response_mask"]).sum() for key, value in outputs.items()
               if key != "sum_pi_squared")
    loss.backward()
    grads = {name: param.grad.clone() for name, param in model.named_parameters()}
    return {"outputs": {key: value.detach() for key, value in outputs.items()}, "grads": grads}


class UlyssesRank:
    def __init__(self, sp: int, seed: int = 0, critic: bool = False, **config) -> None:
        torch.set_num_threads(1)
        self.critic = critic
        self.model = critic_model(seed, **config) if critic else build_tiny_model(seed=seed, **config)
        apply_sequence_parallel(self.model, sp, "actor_rollout_ref.actor.ulysses_sequence_parallel_size")

    def run(self, batch: Batch, remove_padding: bool) -> dict:
        """What one rank computes; its gradients averaged over every rank, as the role's gradient reduce does."""
        self.model.zero_grad(set_to_none=True)
        out = outputs_and_gradients(self.model, batch, remove_padding, self.critic)
        for grad in out["grads"].values():
            dist.all_reduce(grad)
            grad /= dist.get_world_size()
        return out
