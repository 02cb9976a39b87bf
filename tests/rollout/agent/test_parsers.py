"""The hermes tool-call parser and the parser registry."""

from __future__ import annotations

import json

import pytest

from hybridrl.rollout.agent.parsers import get_tool_parser, register_tool_parser, tool_parser_names


def parse(tokenizer, text: str):
    return get_tool_parser("hermes", tokenizer).parse(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_hermes_reads_every_call_and_strips_markup(chatml_tokenizer):
    text = ('Let me compute.<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>\n'
            '<tool_call>{"name": "search", "arguments": {"query": "x", "k": 2}, "id": "c7"}</tool_call><|im_end|>')
    content, calls = parse(chatml_tokenizer, text)
    assert content == "Let me compute.\n"
    assert [(c.name, json.loads(c.arguments), c.tool_call_id, c.parse_error) for c in calls] == [
        ("calculator", {"expression": "2+3"}, None, None), ("search", {"query": "x", "k": 2}, "c7", None)]


def test_hermes_without_calls(chatml_tokenizer):
    assert parse(chatml_tokenizer, "The answer is 4.<|im_end|>") == ("The answer is 4.", [])


def test_hermes_reports_unreadable_calls_instead_of_dropping_them(chatml_tokenizer):
    _, calls = parse(chatml_tokenizer, '<tool_call>{"name": "calc", "arguments": {"e": </tool_call>'
                                       '<tool_call>["calc"]</tool_call>')
    assert [c.name for c in calls] == ["calc", "?"]
    assert "Expecting value" in calls[0].parse_error
    assert 'a tool call is {"name": ..., "arguments": {...}}' in calls[1].parse_error


def test_string_arguments_are_kept_as_written(chatml_tokenizer):
    _, (call,) = parse(chatml_tokenizer, '<tool_call>{"name": "calc", "arguments": "{\\"e\\": \\"1\\"}"}</tool_call>')
    assert json.loads(call.arguments) == {"e": "1"}


def test_unknown_format_names_the_known_ones(chatml_tokenizer):
    with pytest.raises(ValueError, match=r"multi_turn.format='llama3_json' is not a known tool-call format; hybridrl "
                                         r"has \['hermes'"):
        get_tool_parser("llama3_json", chatml_tokenizer)


def test_registering_a_parser(chatml_tokenizer, monkeypatch):
    from hybridrl.rollout.agent import parsers

    monkeypatch.setattr(parsers, "_PARSERS", dict(parsers._PARSERS))  # undone after the test
    @register_tool_parser("test_none")
    class NoCalls:
        def __init__(self, tokenizer):
            self.tokenizer = tokenizer

        stop_token_ids: list[int] = [5]

        def parse(self, token_ids):
            return "", []

    assert "test_none" in tool_parser_names()
    assert get_tool_parser("test_none", chatml_tokenizer).stop_token_ids == [5]
