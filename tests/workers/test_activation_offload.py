"""model.enable_activation_offload: what a training forward saves goes through the hooks (to host memory on a GPU),
parameters stay, and training is unchanged."""

from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from hybridrl.workers.activation_offload import ActivationOffload, OffloadCounts, copy_with_strides
from tests.workers.helpers import build_actor, build_critic, ragged_batch

CHECKPOINTING = ["actor_rollout_ref.model.enable_gradient_checkpointing=true",
                 "critic.model.enable_gradient_checkpointing=true"]
OFFLOAD = ["actor_rollout_ref.model.enable_activation_offload=true", "critic.model.enable_activation_offload=true"]


class TwoCheckpointedLayers(torch.nn.Module):
    """x (B, H) -> two checkpointed tanh(linear) layers -> a linear head (V, H)."""

    def __init__(self, hidden: int = 8, vocab: int = 5) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(2))
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = checkpoint(lambda h, layer=layer: torch.tanh(layer(h)), x, use_reentrant=False)
        return self.head(x)


def loss_and_grads(model: torch.nn.Module, hooks: ActivationOffload | None, device: str = "cpu"):
    x = torch.randn(4, model.layers[0].in_features, generator=torch.Generator().manual_seed(1)).to(device)
    with hooks if hooks is not None else torch.enable_grad():
        loss = model(x).square().mean()
        loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_with_checkpointing_only_the_layer_inputs_and_the_heads_input_are_saved():
    """Each checkpointed layer saves its input (4 x 8), the head its input (4 x 8) and its weight (kept: a
    parameter's view), the loss's square its input (4 x 5); the layers' insides are recomputed, never saved.
    Gradients equal those without the hooks."""
    model = TwoCheckpointedLayers()
    want = loss_and_grads(model, None)
    model.zero_grad(set_to_none=True)
    hooks = ActivationOffload(pin_memory=False)
    got = loss_and_grads(model, hooks)
    assert hooks.counts == OffloadCounts(activations=4, activation_bytes=(3 * 4 * 8 + 4 * 5) * 4, parameters=1)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_role_updates_are_unchanged_and_go_through_the_hooks(tiny_model_dir, role):
    """Two updates with gradient checkpointing, with and without the role's enable_activation_offload: the same
    metrics and weights; the hooks saw the update's activations and kept the parameters (the LM head's weight is
    saved by each log-prob chunk); the no-grad forwards (log-probs, values) go through no hook."""
    build = build_actor if role == "actor" else build_critic
    update = "update_actor" if role == "actor" else "update_critic"
    batch = ragged_batch(num_rows=8, seed=5)
    plain, offloaded = build(tiny_model_dir, CHECKPOINTING), build(tiny_model_dir, CHECKPOINTING + OFFLOAD)
    assert plain.activation_offload is None
    metrics = [[getattr(worker, update)(batch) for _ in range(2)] for worker in (plain, offloaded)]
    assert metrics[0] == metrics[1]
    for (name, want), got in zip(plain.model.named_parameters(), offloaded.model.parameters()):
        assert torch.equal(got, want), name
    counts = offloaded.activation_offload.counts
    assert counts.activations > 0 and counts.parameters > 0, counts
    before = OffloadCounts(**vars(counts))
    offloaded.compute_log_prob(batch) if role == "actor" else offloaded.compute_values(batch)
    assert counts == before


@pytest.mark.parametrize("view", ["permuted", "transposed", "sliced", "expanded"])
def test_copies_keep_the_strides_of_dense_views_and_the_values_of_all(view):
    """A compiled backward asserts the strides of what it saved (e.g. a permuted (B, heads, T) view): a dense view
    travels with its strides; a gapped or overlapping one (a slice, an expand) as a contiguous copy."""
    base = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    tensor = {"permuted": base.permute(0, 2, 1), "transposed": base.transpose(0, 2), "sliced": base[:, 1:],
              "expanded": base[:, :1].expand(2, 5, 4)}[view]
    copy = copy_with_strides(tensor, torch.device("cpu"), asynchronous=False)
    assert torch.equal(copy, tensor) and copy.data_ptr() != tensor.data_ptr()
    dense = view in ("permuted", "transposed")
    assert copy.stride() == (tensor.stride() if dense else tensor.contiguous().stride())


# --------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_saved_activations_wait_in_pinned_host_memory():
    """Between forward and backward the saved layer inputs are in pinned host memory, not on the device; the
    backward brings them back and the gradients equal those without the hooks, bit for bit."""
    model = TwoCheckpointedLayers(hidden=1024, vocab=16).cuda()
    want = loss_and_grads(model, None, "cuda")
    model.zero_grad(set_to_none=True)
    hooks = ActivationOffload(pin_memory=True)
    x = torch.randn(4096, 1024, device="cuda")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    with hooks:
        out = model(x)
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated() - base
        out.square().mean().backward()
    # What checkpoint saves beside the layer inputs differs by device (CUDA: 6 tensors, CPU: 4); none stays on the device.
    assert hooks.counts.activations >= 4, hooks.counts
    assert held < 2 * out.numel() * 4 + 4096 * 1024 * 4, held  # out and at most one layer input, no saved inputs
    model.zero_grad(set_to_none=True)
    got = loss_and_grads(model, ActivationOffload(pin_memory=True), "cuda")
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.gpu
def test_gpu_actor_update_is_unchanged_with_activation_offload(tiny_model_dir):
    batch = ragged_batch(num_rows=8, seed=5)
    plain = build_actor(tiny_model_dir, CHECKPOINTING, device="cuda")
    offloaded = build_actor(tiny_model_dir, CHECKPOINTING + OFFLOAD, device="cuda")
    metrics = [worker.update_actor(batch) for worker in (plain, offloaded)]
    assert metrics[1] == pytest.approx(metrics[0], rel=1e-3)  # bf16; contiguous host copies may pick other kernels
    assert offloaded.activation_offload.counts.activation_bytes > 0
