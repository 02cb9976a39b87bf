"""The tiny tokenizer's ChatML variant (tool role, single-token markers) and that the default one is unchanged."""

from __future__ import annotations

import pytest

from hybridrl.models.tiny import (CHATML_SPECIAL_TOKENS, CHATML_TOOL_TOKENS, DEFAULT_CHARS, SPECIAL_TOKENS,
                                  build_char_tokenizer, save_tiny_model_dir)


def test_chatml_markers_are_single_tokens_after_the_characters():
    tokenizer = build_char_tokenizer(chat_format="chatml")
    markers = CHATML_SPECIAL_TOKENS + CHATML_TOOL_TOKENS
    ids = tokenizer.convert_tokens_to_ids(markers)
    assert ids == list(range(len(tokenizer) - len(markers), len(tokenizer)))
    for marker, token_id in zip(markers, ids):
        assert tokenizer(f"a{marker}b", add_special_tokens=False)["input_ids"][1] == token_id
    # Like Qwen2.5: tool tags survive skip_special_tokens, the turn markers do not.
    text = "<|im_start|>x<tool_call>y</tool_call><|im_end|>"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"], skip_special_tokens=True) == \
        "x<tool_call>y</tool_call>"
    assert tokenizer.convert_ids_to_tokens(list(range(len(SPECIAL_TOKENS)))) == SPECIAL_TOKENS
    assert tokenizer("{\"a\": [1]}_<>|", add_special_tokens=False)["input_ids"].count(tokenizer.unk_token_id) == 0


def test_chatml_template_renders_qwen_turns_tools_and_tool_responses():
    tokenizer = build_char_tokenizer(chat_format="chatml")
    tools = [{"type": "function", "function": {"name": "calc", "description": "C.", "parameters": {
        "type": "object", "properties": {"expression": {"type": "string"}, "digits": {"type": "integer"}}}}}]
    messages = [{"role": "system", "content": "S."}, {"role": "user", "content": "Q?"},
                {"role": "assistant", "content": "Hm.", "tool_calls": [
                    {"type": "function", "function": {"name": "calc", "arguments": {"expression": "1+1"}}}]},
                {"role": "tool", "content": "2"}, {"role": "tool", "content": "x"},
                {"role": "assistant", "content": "2."}]
    assert tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nS.\n# Tools\ncalc(expression, digits)\n<|im_end|>\n"
        "<|im_start|>user\nQ?<|im_end|>\n"
        '<|im_start|>assistant\nHm.<tool_call>{"name": "calc", "arguments": {"expression": "1+1"}}</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>2</tool_response><tool_response>x</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n2.<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.apply_chat_template(messages[:2], tokenize=False) == \
        "<|im_start|>system\nS.<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n"


def test_default_tokenizer_is_unchanged():
    tokenizer = build_char_tokenizer()
    assert len(tokenizer) == len(SPECIAL_TOKENS) + len(set(DEFAULT_CHARS))
    assert tokenizer.apply_chat_template([{"role": "user", "content": "12+3"}], tokenize=False,
                                         add_generation_prompt=True) == "12+3<sep>"
    assert "<|im_start|>" not in tokenizer.get_vocab()


def test_saved_chatml_model_dir_round_trips(tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    path = save_tiny_model_dir(str(tmp_path / "m"), chat_format="chatml")
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert AutoConfig.from_pretrained(path).vocab_size == len(tokenizer) == len(build_char_tokenizer(chat_format="chatml"))
    assert tokenizer("<tool_response>", add_special_tokens=False)["input_ids"] == \
        [tokenizer.convert_tokens_to_ids("<tool_response>")]


def test_unknown_chat_format():
    with pytest.raises(ValueError, match="chat_format='llama3' is not one of"):
        build_char_tokenizer(chat_format="llama3")
