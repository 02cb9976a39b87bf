"""LoRA: only adapters train, ref = adapters off, rollout sync of merged targeted layers, save/export."""

from __future__ import annotations

import copy
import sys

import pytest
import torch

pytest.importorskip("peft")

from peft import PeftModel
from transformers import AutoModelForCausalLM

from hybridrl.logging.backends import MissingDependencyError
from hybridrl.models.lora import (
    apply_lora,
    base_named_weights,
    export_merged,
    merged_lora_deltas,
    merged_named_weights,
    reference_forward_context,
    save_adapter,
    trainable_parameter_names,
)
from hybridrl.models.tiny import build_char_tokenizer, build_tiny_model

VOCAB = 64
IDS = torch.tensor([[5, 9, 13, 21, 8, 30, 2, 17], [40, 41, 42, 43, 44, 45, 46, 47]])


def make_base(arch: str = "qwen2", seed: int = 1):
    """A tiny model with weights large enough that greedy decoding does not just echo its input."""
    model = build_tiny_model(arch, seed=seed, vocab_size=VOCAB)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.3 * noise if "norm" in name else 2 * noise / p.shape[-1] ** 0.5)
    return model.eval()


def make_lora(arch: str = "qwen2", **kwargs):
    """(base copy, LoRA model) with non-zero B so the adapter actually changes outputs."""
    base = make_base(arch)
    kwargs = {"rank": 4, "alpha": 8, "target_modules": "all-linear", **kwargs}
    peft_model = apply_lora(copy.deepcopy(base), **kwargs).eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return base, peft_model


def logits(model):
    with torch.no_grad():
        return model(IDS).logits


def greedy(model, max_new_tokens: int = 12):
    out = model.generate(IDS, attention_mask=torch.ones_like(IDS), do_sample=False,
                         max_new_tokens=max_new_tokens, pad_token_id=0, eos_token_id=None)
    return out[:, IDS.shape[1]:]


@pytest.fixture(scope="module")
def qwen():
    return make_lora("qwen2")


def test_only_adapters_trainable_and_exclude(qwen):
    _, peft_model = qwen
    names = trainable_parameter_names(peft_model)
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    assert not any("lm_head" in n for n in names)  # all-linear leaves the output layer alone
    _, excluded = make_lora("llama", target_modules=["q_proj", "down_proj"], exclude_modules=["down_proj"])
    assert {n.split(".")[-4] for n in trainable_parameter_names(excluded)} == {"q_proj"}


def test_reference_context_uses_base_weights(qwen):
    base, peft_model = qwen
    with reference_forward_context(peft_model):
        assert torch.allclose(logits(peft_model), logits(base), atol=1e-5)
    assert not torch.allclose(logits(peft_model), logits(base), atol=1e-2)  # adapters back on after
    with pytest.raises(TypeError, match="PeftModel"):
        reference_forward_context(base)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])  # tied embeddings + qkv bias; untied
def test_rollout_consumer_gets_merged_weights(arch):
    base, peft_model = make_lora(arch)
    merged = copy.deepcopy(peft_model).merge_and_unload()
    consumer = make_base(arch, seed=99)  # a rollout engine's own copy: different weights until synced
    plain_names = set(dict(consumer.named_parameters()))
    consumer.load_state_dict(dict(base_named_weights(peft_model)))  # first full sync
    deltas = list(merged_lora_deltas(peft_model))  # every later sync: only targeted layers
    assert {n.rsplit(".", 2)[-2] for n, _ in deltas} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                         "up_proj", "down_proj"}
    assert len(deltas) == 7 * 2 and {n for n, _ in deltas} <= plain_names
    consumer.load_state_dict(dict(deltas), strict=False)
    expected = merged.state_dict()
    for name, tensor in consumer.state_dict().items():
        assert torch.allclose(tensor, expected[name], atol=1e-6), name
    assert torch.equal(greedy(consumer), greedy(merged))
    assert not torch.equal(greedy(consumer), greedy(base))  # the adapter matters for these outputs
    full = dict(merged_named_weights(peft_model))
    assert all(torch.allclose(full[n], expected[n], atol=1e-6) for n in expected)


def test_engine_update_weights_with_deltas(qwen):
    from hybridrl.rollout.base import SamplingParams
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    base, peft_model = qwen
    merged = copy.deepcopy(peft_model).merge_and_unload()
    engine = LLMEngine(copy.deepcopy(base), num_kv_blocks=32, block_size=4, device="cpu")
    engine.update_weights(merged_lora_deltas(peft_model))
    params = SamplingParams(do_sample=False, max_new_tokens=10, ignore_eos=True)
    out = engine.generate([row.tolist() for row in IDS], params)
    assert out.token_ids == greedy(merged, 10).tolist()


def test_optimizer_step_changes_only_adapters():
    _, peft_model = make_lora("llama")
    peft_model.train()
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    logp = torch.log_softmax(peft_model(IDS).logits[:, :-1], -1).gather(-1, IDS[:, 1:, None]).squeeze(-1)
    advantages = torch.tensor([[1.0], [-1.0]])  # a GRPO-like signed-advantage loss
    (-(advantages * logp).mean()).backward()
    optimizer.step()
    trainable = set(trainable_parameter_names(peft_model))
    for name, param in peft_model.named_parameters():
        changed = not torch.equal(param, before[name])
        assert changed == (name in trainable), name


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.* is deprecated:FutureWarning")  # peft, direct call
def test_save_adapter_and_export_merged_round_trip(qwen, tmp_path):
    base, peft_model = qwen
    expected = logits(peft_model)
    adapter_dir = save_adapter(peft_model, str(tmp_path / "adapter"))
    assert {p.name for p in (tmp_path / "adapter").iterdir()} >= {"adapter_config.json", "adapter_model.safetensors"}
    reloaded = PeftModel.from_pretrained(copy.deepcopy(base), adapter_dir).eval()
    assert torch.allclose(logits(reloaded), expected, atol=1e-5)
    resumed = apply_lora(copy.deepcopy(base), rank=4, alpha=8, target_modules="all-linear", adapter_path=adapter_dir)
    assert torch.allclose(logits(resumed.eval()), expected, atol=1e-5)
    assert trainable_parameter_names(resumed) == trainable_parameter_names(peft_model)

    out = export_merged(peft_model, build_char_tokenizer(), str(tmp_path / "merged"))
    assert (tmp_path / "merged" / "model.safetensors").exists()
    plain = AutoModelForCausalLM.from_pretrained(out).eval()
    # (W + s·BA)x vs Wx + s·B(Ax): the same in exact arithmetic, ~1e-5 apart in fp32 (was flaky at 1e-5)
    torch.testing.assert_close(logits(plain), expected, atol=1e-4, rtol=1e-4)
    assert torch.allclose(logits(peft_model), expected)  # export left the live model untouched


def test_errors(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="lora_rank"):
        apply_lora(make_base(), rank=0, alpha=16, target_modules="all-linear")
    with pytest.raises(FileNotFoundError, match="lora_adapter_path"):
        apply_lora(make_base(), rank=4, alpha=16, target_modules="all-linear", adapter_path=str(tmp_path))
    monkeypatch.setitem(sys.modules, "peft", None)  # as if peft were not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'hybridrl\[lora\]'"):
        apply_lora(make_base(), rank=4, alpha=16, target_modules="all-linear")
