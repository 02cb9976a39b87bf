"""Regional torch.compile of decoder layers: same log-probs and gradients, same names, actionable failures."""

from __future__ import annotations

import logging

import pytest
import torch

from hybridrl.models.compile import CompileError, compile_decoder_layers, decoder_layers
from hybridrl.models.hf import enable_activation_checkpointing, load_causal_lm
from hybridrl.workers.forward import response_log_probs
from tests.workers.helpers import ragged_batch

CPU = torch.device("cpu")
OFF_KEY = "actor_rollout_ref.actor.use_torch_compile"


def tiny_policy(model_dir: str) -> torch.nn.Module:
    model = load_causal_lm(model_dir, dtype=torch.float32)
    enable_activation_checkpointing(model)
    return model.train()


def log_probs_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    log_probs, entropy = response_log_probs(model, batch, 1.0, compute_entropy=True, remove_padding=True)
    ((log_probs * batch["response_mask"]).sum() + entropy.sum() * 0.1).backward()
    return log_probs.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def test_compiled_layers_give_the_eager_log_probs_and_gradients(tiny_model_dir):
    torch._dynamo.reset()
    eager, compiled = tiny_policy(tiny_model_dir), tiny_policy(tiny_model_dir)
    names = list(compiled.state_dict())
    # aot_eager: Dynamo + AOTAutograd forward/backward graphs (what Inductor receives), without codegen.
    assert compile_decoder_layers(compiled, CPU, "actor", enabled=True, off_key=OFF_KEY,
                                  backend="aot_eager") == len(decoder_layers(compiled)) > 0
    assert list(compiled.state_dict()) == names  # in place: no _orig_mod in parameter names
    for seed in (0, 1):  # two different trimmed shapes
        batch = ragged_batch(6, seed=seed, token_range=(5, 40))
        want_lp, want_grads = log_probs_and_grads(eager, batch)
        got_lp, got_grads = log_probs_and_grads(compiled, batch)
        torch.testing.assert_close(got_lp, want_lp, rtol=1e-5, atol=1e-5)
        for name, grad in want_grads.items():
            torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_inductor_is_not_used_on_cpu_and_off_means_off(tiny_model_dir, caplog):
    model = tiny_policy(tiny_model_dir)
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        assert compile_decoder_layers(model, CPU, "actor", enabled=True, off_key=OFF_KEY) == 0
    assert "use_torch_compile applies on CUDA" in caplog.text
    assert compile_decoder_layers(model, CPU, "actor", enabled=False, off_key=OFF_KEY, backend="eager") == 0
    assert all(layer._compiled_call_impl is None for layer in decoder_layers(model))


def test_a_failing_compilation_names_the_key_to_turn_it_off(tiny_model_dir):
    torch._dynamo.reset()

    def broken_backend(graph_module, example_inputs):
        raise RuntimeError("no kernels for this layer")

    model = tiny_policy(tiny_model_dir)
    compile_decoder_layers(model, CPU, "actor", enabled=True, off_key=OFF_KEY, backend=broken_backend)
    with pytest.raises(CompileError, match=f"{OFF_KEY}=false") as err:
        log_probs_and_grads(model, ragged_batch(4, token_range=(5, 40)))
    assert "actor" in str(err.value) and "no kernels for this layer" in str(err.value)


@pytest.mark.gpu
def test_inductor_layers_match_eager_in_bf16_on_cuda(tiny_model_dir):
    torch._dynamo.reset()
    cuda = torch.device("cuda")
    eager, compiled = (tiny_policy(tiny_model_dir).to(cuda, torch.bfloat16) for _ in range(2))
    assert compile_decoder_layers(compiled, cuda, "actor", enabled=True, off_key=OFF_KEY) > 0
    for seed in (0, 1):
        batch = ragged_batch(6, seed=seed, token_range=(5, 40)).to(cuda)
        want_lp, want_grads = log_probs_and_grads(eager, batch)
        got_lp, got_grads = log_probs_and_grads(compiled, batch)
        mask = batch["response_mask"].bool()
        torch.testing.assert_close(got_lp[mask].float(), want_lp[mask].float(), rtol=0, atol=0.05)
        for name, grad in want_grads.items():  # bf16: Inductor keeps fused intermediates in fp32
            scale = grad.float().abs().max().clamp(min=1e-6)
            assert (got_grads[name].float() - grad.float()).abs().max() / scale < 0.05, name
