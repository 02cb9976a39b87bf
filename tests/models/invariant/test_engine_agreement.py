"""End to end: with actor_rollout_ref.model.batch_invariant, the log-prob the rollout engine records for each
sampled token is the trainer's old_log_prob (workers/forward.py, remove_padding) of the same token.

On a GPU (bf16): bit for bit, Qwen2 (q/k/v bias, tied head) and Qwen3 (q/k norms, untied head). In the
TRITON_INTERPRET=1 subprocess (fp32): to within fp32 rounding (numpy's BLAS rounds a tile's columns by their
place in it, test_kernels.py), far below the 16-bit gaps this mode removes; a wiring mistake (a missed layer,
another temperature, another RoPE table) shows as a gap of 1e-3 or more."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.triton_interpreter import DEVICES, on_device


def tiny_model(model_type: str, dtype: torch.dtype, device: str):
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

    # the interpreter runs each attention program in Python: one KV head there (GQA: test_kernels.py)
    common = dict(vocab_size=256, hidden_size=128, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2 if device == "cuda" else 1, max_position_embeddings=512)
    config = (Qwen2Config(**common, tie_word_embeddings=True) if model_type == "qwen2"
              else Qwen3Config(**common, head_dim=32, tie_word_embeddings=False))
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).to(device, dtype).eval()


def trainer_rows(prompts: list[list[int]], responses: list[list[int]], n: int):
    """verl's rows: left-padded prompt | response, masks and positions."""
    from hybridrl.utils.batch import Batch

    width = max(map(len, prompts))
    rows, masks = [], []
    for i, response in enumerate(responses):
        prompt = prompts[i // n]
        rows.append([0] * (width - len(prompt)) + prompt + response)
        masks.append([0] * (width - len(prompt)) + [1] * (len(prompt) + len(response)))
    mask = torch.tensor(masks)
    response_ids = torch.tensor(responses)
    return Batch({"input_ids": torch.tensor(rows), "attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0),
                  "responses": response_ids, "response_mask": torch.ones_like(response_ids)})


def invariant_trainer(model):
    from hybridrl.models.invariant.hf import use_batch_invariant_numerics
    from hybridrl.models.numerics import keep_residual_stream_fp32

    trainer = copy.deepcopy(model)
    keep_residual_stream_fp32(trainer)
    use_batch_invariant_numerics(trainer)
    return trainer


@pytest.mark.parametrize("device,model_type,remove_padding", [
    ("cpu", "qwen2", True), pytest.param("cuda", "qwen2", True, marks=pytest.mark.gpu),
    pytest.param("cuda", "qwen2", False, marks=pytest.mark.gpu),  # left-padded rows
    pytest.param("cuda", "qwen3", True, marks=pytest.mark.gpu)])
def test_engine_log_probs_are_the_trainers(device, model_type, remove_padding):
    from hybridrl.rollout.base import SamplingParams
    from hybridrl.rollout.engine.llm_engine import LLMEngine
    from hybridrl.workers.forward import response_log_probs

    device = on_device(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = tiny_model(model_type, dtype, device)
    engine = LLMEngine(model, dtype=dtype, device=device, block_size=16, max_num_seqs=8, max_model_len=128,
                       num_kv_blocks=64, max_num_batched_tokens=128, batch_invariant=True)
    prompts = [list(range(1, 6)), list(range(10, 31))]  # the second spans two pages
    out = engine.generate(prompts, SamplingParams(temperature=0.8, n=2, max_new_tokens=8, ignore_eos=True, seed=1))
    batch = trainer_rows(prompts, out.token_ids, 2).to(device)
    with torch.no_grad():
        trainer, _ = response_log_probs(invariant_trainer(model), batch, 0.8, compute_entropy=False,
                                        remove_padding=remove_padding)
    engine_log_probs = torch.tensor(out.log_probs, device=device)
    if device == "cuda":
        assert torch.equal(trainer, engine_log_probs)
    else:
        torch.testing.assert_close(trainer, engine_log_probs, atol=2e-6, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("remove_padding,checkpointing", [(True, False), (False, False), (True, True)])
def test_training_gradients_are_the_plain_forwards(device, remove_padding, checkpointing):
    """A training forward takes each kernel's value and the plain operation's gradient: the gradients (of the
    log-probs and of the entropy, which the engine does not compute) match the model without the mode (fp32 stream)
    to rounding."""
    from hybridrl.models.numerics import keep_residual_stream_fp32
    from hybridrl.workers.forward import response_log_probs

    device = on_device(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = tiny_model("qwen2", dtype, device)
    plain = copy.deepcopy(model)
    keep_residual_stream_fp32(plain)
    invariant = invariant_trainer(model)
    if checkpointing:  # the layers' forward runs again in backward (the kernels' custom gradients included)
        from hybridrl.models.hf import enable_activation_checkpointing

        for trainer in (plain, invariant):
            enable_activation_checkpointing(trainer)
            trainer.train()
    torch.manual_seed(1)
    prompts = [list(range(1, 9)), [5, 6, 7]]
    batch = trainer_rows(prompts, torch.randint(1, 256, (4, 12)).tolist(), 2).to(device)
    grads, entropies = [], []
    for trainer in (plain, invariant):
        log_probs, entropy = response_log_probs(trainer, batch, 1.0, compute_entropy=True,
                                                remove_padding=remove_padding)
        (log_probs.sum() - 0.1 * entropy.sum()).backward()
        grads.append(torch.cat([p.grad.float().flatten() for p in trainer.parameters()]))
        entropies.append(entropy.detach().float())
    tol = 2e-2 if device == "cuda" else 1e-4
    assert (grads[0] - grads[1]).norm() <= tol * grads[0].norm()
    torch.testing.assert_close(entropies[1], entropies[0], atol=tol, rtol=tol)


def test_autocast_over_fp32_master_weights_computes_as_16_bit_weights():
    """One device trains fp32 master weights under autocast: the kernels get the weights, inputs and norm weights
    in the autocast dtype, as the engine's 16-bit copy holds them, so the log-probs equal a 16-bit model's."""
    from tests.triton_interpreter import INTERPRETED

    if not INTERPRETED:
        pytest.skip("runs in the TRITON_INTERPRET=1 subprocess")
    from hybridrl.workers.forward import response_log_probs

    master = tiny_model("qwen2", torch.float32, "cpu")
    half = copy.deepcopy(master).half()
    torch.manual_seed(1)
    batch = trainer_rows([list(range(1, 9)), [5, 6, 7]], torch.randint(1, 256, (4, 6)).tolist(), 2)
    with torch.no_grad():
        want, _ = response_log_probs(invariant_trainer(half), batch, 1.0, compute_entropy=False)
        with torch.autocast("cpu", dtype=torch.float16):
            got, _ = response_log_probs(invariant_trainer(master), batch, 1.0, compute_entropy=False)
    assert torch.equal(got, want)
