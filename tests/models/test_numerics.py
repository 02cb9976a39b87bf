"""The numerics the rollout engine and the trainer's HF forward share (models/numerics.py; docs/design.md,
"Numerics shared by the engine and the trainer"): per-token log-probs of the same tokens on both sides.

CPU, a toy Qwen2 shape (4 layers, HF's init). Measured on it (mean |rollout - trainer log-prob| over 8 rows x
16 sampled tokens, 3 seeds): fp32 < 1e-6; bf16 with both sides on a 16-bit residual stream (the numerics
before the shared fp32 stream) 1.5e-4 - 2.0e-4, both on the fp32 stream 1.6e-4 - 2.1e-4; one side on each
1.0e-3 - 1.2e-3. At 4 layers the residual stream's rounding is not yet the largest error, so the two shared
numerics agree equally well here; at a 24-layer Qwen2.5-0.5B shape the CPU proxy gives 0.0085 before and
0.0044 after (benchmarks/mismatch_bench.py measures it on a GPU). The tests below pin what holds at any
depth: each pair of shared numerics agrees, and a mix is several times worse.
"""

from __future__ import annotations

import copy

import pytest
import torch

from hybridrl.models.numerics import keep_residual_stream_fp32, keeps_fp32_residual_stream
from hybridrl.models.tiny import build_tiny_model
from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.engine.llm_engine import LLMEngine

SHAPE = dict(vocab_size=512, hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=384)
PROMPT_LENGTHS = (5, 17, 33, 12)
NEW_TOKENS = 16


def make_prompts(seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [[int(t) for t in torch.randint(3, 500, (length,), generator=generator)] for length in PROMPT_LENGTHS]


def engine_for(model, fp32_residual: bool = True) -> LLMEngine:
    return LLMEngine(model, device="cpu", num_kv_blocks=128, block_size=4, fp32_residual=fp32_residual)


@torch.no_grad()
def trainer_log_probs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    """The trainer's recomputation: one forward over prompt + response, logits in the model's dtype, then
    log_softmax in fp32 (algorithms/logprob.py)."""
    logits = model(torch.tensor([prompt + response])).logits[0, len(prompt) - 1:-1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(response)[:, None])[:, 0]


def mean_gap(model, prompts, out, n: int) -> float:
    gaps = [(torch.tensor(out.log_probs[row]) - trainer_log_probs(model, prompts[row // n], out.token_ids[row])).abs()
            for row in range(len(out.token_ids))]
    return torch.cat(gaps).mean().item()


@pytest.fixture(scope="module")
def bf16_rollouts():
    """A bf16 model and the rollouts of both engine numerics (same seed) over the same prompts."""
    model = build_tiny_model("qwen2", seed=0, dtype=torch.bfloat16, **SHAPE)
    prompts = make_prompts()
    params = SamplingParams(temperature=1.0, n=2, max_new_tokens=NEW_TOKENS, ignore_eos=True, seed=0)
    outs = {fp32: engine_for(model, fp32).generate(prompts, params) for fp32 in (False, True)}
    return model, prompts, outs


def test_fp32_engine_log_probs_equal_the_trainer_forward():
    model = build_tiny_model("qwen2", seed=0, **SHAPE)
    prompts = make_prompts()
    engine = engine_for(model)
    out = engine.generate(prompts, SamplingParams(temperature=1.0, n=2, max_new_tokens=NEW_TOKENS, ignore_eos=True,
                                                  seed=0))
    assert engine.model.residual_dtype is None  # fp32 weights: nothing to widen
    assert mean_gap(model, prompts, out, 2) < 1e-5


def test_bf16_engine_and_trainer_agree_when_they_share_the_residual_stream(bf16_rollouts):
    model, prompts, outs = bf16_rollouts
    plain_plain = mean_gap(model, prompts, outs[False], 2)
    fp32_plain = mean_gap(model, prompts, outs[True], 2)
    hooks = keep_residual_stream_fp32(model)
    try:
        fp32_fp32 = mean_gap(model, prompts, outs[True], 2)
        plain_fp32 = mean_gap(model, prompts, outs[False], 2)
    finally:
        hooks.remove()
    assert fp32_fp32 < 5e-4 and plain_plain < 5e-4
    # a side that rounds its residual stream where the other does not departs by far more than either pair
    assert min(fp32_plain, plain_fp32) > 3 * max(fp32_fp32, plain_plain)


def test_bf16_engine_prefill_and_decode_give_one_log_prob():
    """Token k of a greedy rollout scored twice by the engine: in the decode step that produced it, and in the
    prefill of prompt + the first k tokens (a different attention path and GEMM shape)."""
    model = build_tiny_model("qwen2", seed=1, dtype=torch.bfloat16, **SHAPE)
    engine = engine_for(model)
    prompt = make_prompts(1)[1]
    greedy = SamplingParams(do_sample=False, max_new_tokens=10, ignore_eos=True)
    decoded = engine.generate([prompt], greedy)
    tokens, decode_log_probs = decoded.token_ids[0], decoded.log_probs[0]
    continued = [prompt + tokens[:k] for k in range(1, len(tokens))]
    prefilled = engine.generate(continued, SamplingParams(do_sample=False, max_new_tokens=1, ignore_eos=True))
    gaps = []
    for k, (token, log_prob) in enumerate(zip(prefilled.token_ids, prefilled.log_probs), start=1):
        if token[0] == tokens[k]:  # a bf16 near-tie may pick another arg-max; the rest must agree
            gaps.append(abs(log_prob[0] - decode_log_probs[k]))
    assert len(gaps) >= 7
    assert max(gaps) < 5e-3 and sum(gaps) / len(gaps) < 1e-3


def test_the_hooks_leave_fp32_forwards_alone_and_remove_cleanly():
    model = build_tiny_model("qwen2", seed=0, **SHAPE)
    ids = torch.tensor([make_prompts()[2]])
    with torch.no_grad():
        plain = model(ids).logits
        hooks = keep_residual_stream_fp32(model)
        assert keeps_fp32_residual_stream(model) and keep_residual_stream_fp32(model) is hooks  # once per model
        torch.testing.assert_close(model(ids).logits, plain, rtol=0, atol=0)
        copy.deepcopy(model)(ids)  # the scratch state is a plain dataclass: copies still run
        model.to(torch.bfloat16)
        hooked = model(ids).logits
        hooks.remove()
        assert not keeps_fp32_residual_stream(model)
        unhooked = model(ids).logits
    assert not torch.equal(hooked, unhooked)  # bf16: the stream's rounding shows in the logits


@torch.no_grad()
def test_under_autocast_the_embedding_and_norm_outputs_are_rounded_as_the_engine_holds_them():
    """fp32 master weights under bf16 autocast (one device, verl's default precision): the residual stream is
    fp32 there already; the hooks round the embedding and RMSNorm outputs as the engine's bf16 copies do."""
    model = build_tiny_model("qwen2", seed=0, **SHAPE)
    ids = torch.tensor([make_prompts()[0]])
    seen: dict[str, torch.Tensor] = {}
    keep_residual_stream_fp32(model)
    model.model.embed_tokens.register_forward_hook(lambda m, a, out: seen.setdefault("embed", out))
    model.model.norm.register_forward_hook(lambda m, a, out: seen.setdefault("norm", out))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(ids)
    embed = model.model.embed_tokens.weight[ids[0]]
    assert seen["embed"].dtype == torch.float32
    torch.testing.assert_close(seen["embed"][0], embed.to(torch.bfloat16).float(), rtol=0, atol=0)
    assert seen["norm"].dtype == torch.bfloat16


def test_architectures_the_engine_does_not_run_are_left_alone():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    assert keep_residual_stream_fp32(model) is None and not keeps_fp32_residual_stream(model)


@pytest.mark.parametrize("fp32_residual", [True, False])
def test_load_causal_lm_gives_the_trainer_the_shared_numerics(tiny_model_dir, fp32_residual):
    from hybridrl.models.hf import load_causal_lm

    model = load_causal_lm(tiny_model_dir, dtype=torch.bfloat16, fp32_residual=fp32_residual)
    assert keeps_fp32_residual_stream(model) is fp32_residual
