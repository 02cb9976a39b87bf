"""Inputs of the RL-step benchmark that both frameworks read the same way: model dir, tokenizer, data.

Neither machine can download Qwen's tokenizer, so a stand-in `PreTrainedTokenizerFast` tokenizes
like `common.hash_tokenize` (one token per 4 characters; Qwen's <|im_start|>/<|im_end|> are single
special tokens: ~112 tokens per GSM8K chat prompt, real Qwen2.5 gives ~105) and has exactly the
model's vocabulary size, so every sampled id decodes. hybridrl (through its parquet dataset) and TRL (through
`apply_chat_template`) then see identical prompt token counts; Qwen's chat template is the tokenizer's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from benchmarks.common import GSM8K_64, QWEN_CHAT, build_random_model
from hybridrl.data.preprocess.gsm8k import make_row

CHUNK_CHARS = 4
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # pad, start of turn, end of turn = EOS
# Qwen's template for a system turn + the given turns; equals QWEN_CHAT.format(content=...) for one user turn.
CHAT_TEMPLATE = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def gsm8k_rows(num_prompts: int, path: str | Path = GSM8K_64) -> list[dict]:
    """verl-schema GSM8K rows (question + instruction as one user message; rule-based ground truth)."""
    rows = []
    with Path(path).open() as f:
        for index, line in enumerate(f):
            if len(rows) == num_prompts:
                break
            raw = json.loads(line)
            rows.append(make_row(raw["question"], raw["answer"], "train", index))
    if len(rows) < num_prompts:
        raise ValueError(f"{path} has {len(rows)} rows, the benchmark needs {num_prompts}")
    return rows


def _chunks(text: str) -> list[str]:
    return [text[i:i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]


def _special_ids(config) -> dict[str, int]:
    """pad and EOS at the model config's ids (Qwen: 151643, 151645); <|im_start|> just below EOS."""
    ids = {SPECIALS[0]: config.pad_token_id, SPECIALS[2]: config.eos_token_id}
    ids[SPECIALS[1]] = next(i for i in range(config.eos_token_id - 1, -1, -1) if i not in ids.values())
    return ids


def build_stand_in_tokenizer(texts: list[str], config):
    """A WordLevel tokenizer over the 4-character chunks of `texts`, padded to `config.vocab_size` ids."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = _special_ids(config)
    vocab = dict(specials)
    vocab["<unk>"] = next(i for i in range(config.vocab_size) if i not in vocab.values())
    free = [i for i in range(config.vocab_size) if i not in vocab.values()]
    chunks = dict.fromkeys(c for text in texts for part in _split_specials(text) for c in _chunks(part))
    if len(chunks) > len(free):
        raise ValueError(f"{len(chunks)} distinct prompt chunks do not fit a vocabulary of {config.vocab_size}; "
                         "use fewer prompts or a larger vocab_size")
    vocab.update(zip(chunks, free))
    for index in free[len(chunks):]:  # every id decodes (random weights sample all of them)
        vocab[f"<unused{index}>"] = index
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]{1,%d}" % CHUNK_CHARS), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token=SPECIALS[0],
                                        eos_token=SPECIALS[2], additional_special_tokens=[SPECIALS[1]])
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def _split_specials(text: str) -> list[str]:
    """Text pieces between special tokens (those are whole tokens, as in Qwen's tokenizer)."""
    pieces = [text]
    for special in SPECIALS:
        pieces = [part for piece in pieces for part in piece.split(special)]
    return [p for p in pieces if p]


def prompt_texts(rows: list[dict]) -> list[str]:
    return [QWEN_CHAT.format(content=row["prompt"][0]["content"]) for row in rows]


def write_model_dir(model_dir: Path, tokenizer_dir: Path, config, rows: list[dict], dtype: torch.dtype,
                    seed: int = 0):
    """Random weights of `config` in `dtype` (an HF model dir) and the stand-in tokenizer in its own dir.

    Apart because transformers 5 loads a tokenizer next to a qwen2 config.json as `Qwen2Tokenizer`,
    rebuilding it as byte-level BPE (which would tokenize per character); alone it loads as saved.
    """
    model = build_random_model(config, dtype, "cpu", seed=seed)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(model_dir)
    del model
    tokenizer = build_stand_in_tokenizer(prompt_texts(rows), config)
    tokenizer.save_pretrained(tokenizer_dir)
    return tokenizer


def prompt_lengths(tokenizer, rows: list[dict]) -> list[int]:
    """Tokens per chat-templated prompt, as both frameworks compute them."""
    return [len(tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                              return_dict=True)["input_ids"]) for row in rows]
