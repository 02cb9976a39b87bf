"""hybridrl's models attend through transformers' SDPA attention without PyTorch's cuDNN backend."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hybridrl.models.attention import ATTENTION_NAME, use_shape_agnostic_sdpa
from hybridrl.models.hf import load_causal_lm, load_value_model
from hybridrl.models.tiny import TINY_ARCHS, build_tiny_model

IDS = torch.tensor([[0, 0, 0, 5, 6, 7, 8, 9, 10, 11], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]])
MASK = (IDS != 0).long()


def _pair(arch: str, **config):
    plain = build_tiny_model(arch, seed=0, attn_implementation="sdpa", **config).eval()
    routed = build_tiny_model(arch, seed=0, attn_implementation="sdpa", **config).eval()
    use_shape_agnostic_sdpa(routed)
    return plain, routed


@pytest.mark.parametrize("arch", sorted(TINY_ARCHS))
def test_routed_attention_gives_transformers_sdpa_logits_with_and_without_a_padding_mask(arch):
    plain, routed = _pair(arch)
    assert routed.config._attn_implementation == ATTENTION_NAME
    with torch.no_grad():
        for mask in (MASK, None):
            expected = plain(input_ids=IDS, attention_mask=mask).logits
            got = routed(input_ids=IDS, attention_mask=mask).logits
            valid = MASK.bool() if mask is not None else torch.ones_like(MASK, dtype=torch.bool)
            torch.testing.assert_close(got[valid], expected[valid], rtol=0, atol=0)


def test_a_sliding_window_is_kept():
    plain, routed = _pair("mistral", sliding_window=4)
    ids = torch.arange(3, 15)[None]
    with torch.no_grad():
        torch.testing.assert_close(routed(input_ids=ids).logits, plain(input_ids=ids).logits, rtol=0, atol=0)
        full = build_tiny_model("mistral", seed=0, attn_implementation="sdpa", sliding_window=None).eval()
        assert not torch.allclose(full(input_ids=ids).logits[0, -1], plain(input_ids=ids).logits[0, -1])


def test_attention_runs_with_the_cudnn_backend_off_and_restores_it_after(monkeypatch):
    _, routed = _pair("qwen2")
    seen = []
    real = F.scaled_dot_product_attention

    def recording(*args, **kwargs):
        seen.append((torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled()))
        return real(*args, **kwargs)

    before = torch.backends.cuda.cudnn_sdp_enabled()
    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    with torch.no_grad():
        routed(input_ids=IDS, attention_mask=MASK)
    assert seen and all(state == (False, True) for state in seen)
    assert torch.backends.cuda.cudnn_sdp_enabled() == before


def test_gradients_match_transformers_sdpa():
    plain, routed = _pair("qwen2")
    for model in (plain, routed):
        model(input_ids=IDS, attention_mask=MASK).logits[MASK.bool()].square().mean().backward()
    for (name, a), (_, b) in zip(plain.named_parameters(), routed.named_parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=0, atol=0, msg=name)


def test_other_attention_implementations_are_left_as_they_are():
    model = build_tiny_model("qwen2", seed=0, attn_implementation="eager")
    use_shape_agnostic_sdpa(model)
    assert model.config._attn_implementation == "eager"


def test_loaded_policy_and_value_models_are_routed(tiny_model_dir):
    assert load_causal_lm(tiny_model_dir).config._attn_implementation == ATTENTION_NAME
    assert load_value_model(tiny_model_dir).config._attn_implementation == ATTENTION_NAME


def test_saved_configs_do_not_name_the_routed_attention(tmp_path):
    """A checkpoint or HF export loads anywhere: the attention name stays in this process."""
    _, routed = _pair("qwen2")
    routed.save_pretrained(tmp_path)
    assert ATTENTION_NAME not in (tmp_path / "config.json").read_text()
    assert ATTENTION_NAME not in routed.config.to_json_string()


@pytest.mark.gpu
def test_on_cuda_no_cudnn_attention_kernel_runs_for_a_training_step():
    from torch.profiler import ProfilerActivity, profile

    model = build_tiny_model("qwen2", seed=0, dtype=torch.bfloat16, attn_implementation="sdpa").cuda()
    use_shape_agnostic_sdpa(model)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for length in (37, 61):  # two shapes: a per-shape build would show as two cuDNN graphs
            ids = torch.randint(3, 100, (3, length), device="cuda")
            model(input_ids=ids).logits.float().square().mean().backward()
        torch.cuda.synchronize()
    kernels = [event.name for event in prof.events() if event.device_type == torch.autograd.DeviceType.CUDA]
    assert kernels and not [name for name in kernels if "cudnn" in name.lower()]
    assert [name for name in kernels if "flash" in name.lower()]
