"""Tiny, download-free models and tokenizers for tests, the embedded quickstart and benchmarks.

`build_char_tokenizer` makes a real `PreTrainedTokenizerFast` (saveable, loadable with
`AutoTokenizer.from_pretrained`) whose vocabulary is single characters plus special tokens and whose
chat template concatenates user contents and ends the prompt with "=" style separator `<sep>`.
With `chat_format="chatml"` it speaks Qwen2.5's ChatML dialect instead (tool role, `<tool_call>` and
`<tool_response>` blocks, `<|im_end|>` followed by a newline), for agent-loop tests and tool tasks.
`build_tiny_model` makes a randomly initialised HF causal LM of a real architecture.
"""

from __future__ import annotations

import string

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<sep>"]
DEFAULT_CHARS = string.digits + string.ascii_letters + " +-*/=,.:;?!#()'\"\n"

# Messages' contents joined; a generation prompt ends with <sep>; assistant turns end with <eos>.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{{ '<sep>' + message['content'] + '<eos>' }}"
    "{% else %}{{ message['content'] }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<sep>' }}{% endif %}"
)


# ChatML as Qwen2.5 renders it, compacted for a character-level model: the tools are listed by signature
# rather than as JSON schemas, and the tool-call / tool-response blocks carry no inner newlines. What
# matters for agent loops is kept exactly: `<|im_end|>` closes every turn and the template renders a
# newline after it, which generation (stopping at `<|im_end|>`) does not produce (Qwen's boundary case);
# tool responses are grouped into one user turn; the generation prompt is `<|im_start|>assistant\n`.
CHATML_SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>"]
# Qwen2.5 registers these as added tokens that are not "special": decoding with skip_special_tokens keeps them.
CHATML_TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
CHATML_CHARS = "".join(ch for ch in string.printable if ch not in "\r\x0b\x0c")
CHATML_TEMPLATE = (
    "{%- if tools %}"
    "{{ '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\\n' }}{%- endif %}"
    "{{ '# Tools\\n' }}"
    "{%- for tool in tools %}{%- set fn = tool['function'] if tool['function'] is defined else tool %}"
    "{{ fn['name'] + '(' + (fn['parameters']['properties'] | list | join(', ')) + ')\\n' }}"
    "{%- endfor %}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and loop.first and tools %}"
    "{%- elif message['role'] == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{ '<|im_start|>user\\n' }}{%- endif %}"
    "{{ '<tool_response>' + message['content'] + '</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{%- for tool_call in message['tool_calls'] or [] %}"
    "{%- set call = tool_call['function'] if tool_call['function'] is defined else tool_call %}"
    "{{ '<tool_call>' + ({'name': call['name'], 'arguments': call['arguments']} | tojson) + '</tool_call>' }}"
    "{%- endfor %}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)
CHAT_FORMATS = ("plain", "chatml")


def _byte_level_symbol(ch: str) -> str:
    """GPT-2's printable stand-in for a one-byte character (e.g. " " -> "Ġ", "\\n" -> "Ċ")."""
    code = ord(ch)
    if code > 255:
        raise ValueError(f"character {ch!r} is not a single byte; the char tokenizer supports bytes only")
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if code in printable:
        return ch
    return chr(256 + [b for b in range(256) if b not in printable].index(code))


def build_char_tokenizer(chars: str | None = None, chat_format: str = "plain") -> PreTrainedTokenizerFast:
    """A character-level tokenizer: ids 0-4 are <pad>,<eos>,<bos>,<unk>,<sep>, then one id per char.

    `chat_format="plain"`: the `<sep>` template above (chars default to DEFAULT_CHARS). `"chatml"`: the ChatML
    template with a tool role; `<|im_start|>`, `<|im_end|>` and the four tool tags follow the characters as
    single tokens (chars default to every printable ASCII character, which JSON tool calls need)."""
    if chat_format not in CHAT_FORMATS:
        raise ValueError(f"chat_format={chat_format!r} is not one of {CHAT_FORMATS}")
    if chars is None:
        chars = CHATML_CHARS if chat_format == "chatml" else DEFAULT_CHARS
    # Byte-level symbols (space -> "Ġ") and a merge-free BPE: one token per character, and the same
    # tokenization when transformers re-creates the tokenizer as a Qwen2 (byte-level BPE) tokenizer.
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in dict.fromkeys(chars):
        vocab.setdefault(_byte_level_symbol(ch), len(vocab))
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        additional_special_tokens=["<sep>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    if chat_format == "chatml":
        _add_chatml_tokens(tokenizer)
    return tokenizer


def _add_chatml_tokens(tokenizer: PreTrainedTokenizerFast) -> None:
    tokenizer.add_special_tokens({"additional_special_tokens": ["<sep>", *CHATML_SPECIAL_TOKENS]})
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in CHATML_TOOL_TOKENS])
    tokenizer.chat_template = CHATML_TEMPLATE


TINY_ARCHS = {
    "qwen2": dict(model_type="qwen2", tie_word_embeddings=True),
    "qwen3": dict(model_type="qwen3", head_dim=16, tie_word_embeddings=True),
    "llama": dict(model_type="llama", tie_word_embeddings=False),
    "mistral": dict(model_type="mistral", tie_word_embeddings=False),
    "phi3": dict(model_type="phi3", tie_word_embeddings=False),
}


def tiny_config(arch: str = "qwen2", vocab_size: int = 128, hidden_size: int = 64, num_layers: int = 2,
                num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int = 128,
                max_position_embeddings: int = 512, **overrides):
    """An HF config of architecture `arch` (qwen2, qwen3, llama, mistral, phi3) at toy size."""
    if arch not in TINY_ARCHS:
        raise ValueError(f"unknown tiny architecture {arch!r}; choose one of {sorted(TINY_ARCHS)}")
    spec = dict(TINY_ARCHS[arch])
    model_type = spec.pop("model_type")
    kwargs = dict(
        vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        intermediate_size=intermediate_size, max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )
    kwargs.update(spec)
    kwargs.update(overrides)
    return AutoConfig.for_model(model_type, **kwargs)


def build_tiny_model(arch: str = "qwen2", seed: int = 0, dtype: torch.dtype = torch.float32,
                     **config_overrides) -> PreTrainedModel:
    """A randomly initialised causal LM (seeded) of a real HF architecture."""
    config = tiny_config(arch, **config_overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    return model


def save_tiny_model_dir(path: str, arch: str = "qwen2", seed: int = 0, chars: str | None = None,
                        chat_format: str = "plain", **config_overrides) -> str:
    """Write a tiny model + char tokenizer as a local HF model directory (what `model.path` points at)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = build_char_tokenizer(chars, chat_format=chat_format)
    config_overrides.setdefault("vocab_size", len(tokenizer))
    model = build_tiny_model(arch, seed=seed, **config_overrides)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
