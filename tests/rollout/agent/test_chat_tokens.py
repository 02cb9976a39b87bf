"""Continuous tokens: turn-boundary glue per model family, observation suffix diffs, template checks."""

from __future__ import annotations

import pytest

from hybridrl.models.tiny import build_char_tokenizer
from hybridrl.rollout.agent.chat_tokens import ChatRenderer, TurnBoundary


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_qwen_boundary_inserts_the_newline_after_im_end(chatml_tokenizer):
    boundary = ChatRenderer(chatml_tokenizer, model_type="qwen2").boundary
    im_end, newline = ids(chatml_tokenizer, "<|im_end|>\n")
    assert boundary.family == "chatml" and boundary.stop_ids == [im_end]
    assert boundary.glue_after(ids(chatml_tokenizer, "hi<|im_end|>")) == [newline]
    # Stopped elsewhere (a parser stop token, EOS, ...): the whole turn end is inserted.
    assert boundary.glue_after(ids(chatml_tokenizer, "hi</tool_call>")) == [im_end, newline]
    assert boundary.glue_after(ids(chatml_tokenizer, "hi<|im_end|>\n")) == []


@pytest.mark.parametrize("model_type", [None, "llama", "qwen3"])
def test_the_default_hook_derives_the_turn_end_from_the_template(chatml_tokenizer, model_type):
    boundary = ChatRenderer(chatml_tokenizer, model_type=model_type).boundary
    assert boundary.closing_ids == ids(chatml_tokenizer, "<|im_end|>\n")
    assert boundary.family == ("chatml" if model_type == "qwen3" else "derived")


def test_the_plain_tiny_template_ends_turns_with_eos(char_tokenizer):
    boundary = ChatRenderer(char_tokenizer, model_type="llama").boundary
    assert boundary.closing_ids == [char_tokenizer.eos_token_id]
    assert boundary.glue_after([5, 6, char_tokenizer.eos_token_id]) == []


def test_generic_glue_keeps_the_longest_sampled_start():
    boundary = TurnBoundary([7, 8, 9], family="derived")
    assert boundary.glue_after([1, 7]) == [8, 9] and boundary.glue_after([7, 8]) == [9]
    assert boundary.glue_after([1, 2]) == [7, 8, 9] and boundary.glue_after([]) == [7, 8, 9]


def test_observation_tokens_are_suffix_diffs(chatml_tokenizer):
    renderer = ChatRenderer(chatml_tokenizer, model_type="qwen2")
    body, generation_prompt = renderer.observation_ids([{"role": "tool", "content": "5"},
                                                        {"role": "tool", "content": "7"}])
    assert body == ids(chatml_tokenizer, "<|im_start|>user\n<tool_response>5</tool_response>"
                                         "<tool_response>7</tool_response><|im_end|>\n")
    assert generation_prompt == ids(chatml_tokenizer, "<|im_start|>assistant\n")
    body, _ = renderer.observation_ids([{"role": "user", "content": "and 3+3?"}])
    assert body == ids(chatml_tokenizer, "<|im_start|>user\nand 3+3?<|im_end|>\n")


def test_template_kwargs_reach_the_template():
    tokenizer = build_char_tokenizer(chat_format="chatml")
    tokenizer.chat_template = tokenizer.chat_template.replace(
        "{{ '<|im_start|>assistant\\n' }}", "{{ '<|im_start|>assistant\\n' + ('<think></think>' if not thinking else '') }}")
    renderer = ChatRenderer(tokenizer, chat_template_kwargs={"thinking": False}, model_type="qwen3")
    _, generation_prompt = renderer.observation_ids([{"role": "tool", "content": "5"}])
    assert generation_prompt == ids(tokenizer, "<|im_start|>assistant\n<think></think>")


def test_a_template_that_rewrites_history_is_refused():
    tokenizer = build_char_tokenizer(chat_format="chatml")
    # Newest message first: appending a message changes how the earlier ones render.
    tokenizer.chat_template = "{% for m in messages | reverse %}{{ m['content'] }};{% endfor %}"
    renderer = ChatRenderer(tokenizer)
    with pytest.raises(ValueError, match=r"the chat template is not append-only for \['tool'\]"):
        renderer.observation_ids([{"role": "tool", "content": "5"}])


def test_a_tokenizer_without_chat_template_is_refused():
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = None
    with pytest.raises(ValueError, match="set actor_rollout_ref.model.custom_chat_template"):
        ChatRenderer(tokenizer)


def test_a_qwen_model_type_needs_single_token_turn_ends(char_tokenizer):
    with pytest.raises(ValueError, match=r"model_type='qwen2' is treated as a ChatML \(Qwen\) model"):
        ChatRenderer(char_tokenizer, model_type="qwen2")


def test_templates_without_a_system_role_get_a_user_only_prefix():
    tokenizer = build_char_tokenizer(chat_format="chatml")
    tokenizer.chat_template = (  # Gemma's shape: a system message is an error
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
    renderer = ChatRenderer(tokenizer)
    body, generation_prompt = renderer.observation_ids([{"role": "tool", "content": "5"}])
    assert body == ids(tokenizer, "<start_of_turn>tool\n5<end_of_turn>\n")
    assert generation_prompt == ids(tokenizer, "<start_of_turn>model\n")
