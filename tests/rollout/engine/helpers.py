"""Tiny HF models with weights scaled up so greedy outputs vary, and HF references to compare against."""

import torch

from hybridrl.models.tiny import build_tiny_model
from hybridrl.rollout.engine.llm_engine import LLMEngine

PROMPTS = [list(range(3, 15)), [7, 8, 9], [40, 41, 42, 43, 44, 45, 46, 47, 48]]


def make_model(arch="qwen2", seed=1, scale=2.0, **overrides):
    """A tiny model whose random weights are large enough that it does not just echo its input.

    `scale` 2 (default) makes attention nearly one-hot: greedy paths are decisive in fp32 but chaotic
    under bf16 rounding (one ulp in RoPE flips an attention argmax); bf16 parity tests use 1."""
    model = build_tiny_model(arch, seed=seed, **overrides)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.3 * noise if "norm" in name else scale * noise / p.shape[-1] ** 0.5)
    return model


def make_engine(model, **kwargs):
    kwargs = {"num_kv_blocks": 64, "block_size": 4, **kwargs}
    return LLMEngine(model, **kwargs)


def hf_generate_greedy(model, prompt, max_new_tokens):
    """HF `generate` (greedy, stops at the model's EOS) without the prompt."""
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_new_tokens=max_new_tokens, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@torch.no_grad()
def hf_greedy_no_eos(model, prompt, max_new_tokens):
    """Greedy by full HF forwards (no KV cache, no EOS stop)."""
    ids = list(prompt)
    for _ in range(max_new_tokens):
        ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


@torch.no_grad()
def hf_logprobs(model, prompt, response, temperature):
    """log_softmax(logits / temperature) of `response` tokens under one HF forward of prompt + response."""
    ids = torch.tensor([prompt + response])
    logits = model(ids).logits[0, len(prompt) - 1:-1].float() / temperature
    return logits.log_softmax(-1).gather(-1, torch.tensor(response)[:, None])[:, 0]


def to_bf16_keeping_rope_fp32(model, device):
    """`model.to(device, bf16)` as `from_pretrained(dtype=bf16)` leaves it: RoPE inverse frequencies stay
    fp32 (a plain `.to` rounds them to bf16, which shifts HF's angles by ~0.4% and so its tokens)."""
    rope = {name: buf.detach().clone() for name, buf in model.named_buffers() if "inv_freq" in name}
    model = model.to(device, torch.bfloat16)
    for name, buf in rope.items():
        owner, attr = name.rsplit(".", 1)
        setattr(model.get_submodule(owner), attr, buf.to(device))
    return model


def paged_kv_case(context_lens, num_kv_heads, head_dim, page, gen, extra_blocks=3):
    """Random fp32 K/V caches and shuffled, zero-padded int32 block tables (`extra_blocks` wider than the longest
    sequence needs) for ragged `context_lens`: what the paged attention kernels read."""
    need = [-(-c // page) for c in context_lens]
    num_blocks = sum(need) + 4
    perm = torch.randperm(num_blocks, generator=gen)[: sum(need)]
    tables = torch.zeros(len(context_lens), max(need) + extra_blocks, dtype=torch.int32)
    used = 0
    for b, n in enumerate(need):
        tables[b, :n] = perm[used: used + n]
        used += n
    shape = (num_blocks, page, num_kv_heads, head_dim)
    return torch.randn(shape, generator=gen), torch.randn(shape, generator=gen), tables
