"""Tool-call parsers (`multi_turn.format`): the model's sampled tokens -> (assistant text, tool calls).

Registry by name, as verl's `ToolParser.get_tool_parser`. `hermes` reads the format of Qwen2.5 / Qwen3
(and NousResearch Hermes) chat templates: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any
number per turn. A block whose JSON cannot be read is not dropped (verl drops it with a log line): it
becomes a call with `parse_error`, so the model is told and the error is counted.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Protocol

from hybridrl.rollout.tools.schema import ToolCall


class ToolParser(Protocol):
    """Turns a turn's sampled ids into the assistant's text (tool-call markup removed) and its tool calls."""

    @property
    def stop_token_ids(self) -> list[int]:
        """Ids that must end a generation turn so the parser can run (injected into the turn's stop ids)."""
        ...

    def parse(self, token_ids: list[int]) -> tuple[str, list[ToolCall]]:
        ...


_PARSERS: dict[str, Callable[[Any], ToolParser]] = {}


def register_tool_parser(name: str) -> Callable:
    """Class decorator: `@register_tool_parser("my_format")` makes `multi_turn.format=my_format` use it; the
    class is built as `cls(tokenizer)`."""

    def decorate(cls: Callable[[Any], ToolParser]) -> Callable[[Any], ToolParser]:
        _PARSERS[name] = cls
        return cls

    return decorate


def tool_parser_names() -> list[str]:
    return sorted(_PARSERS)


def get_tool_parser(name: str, tokenizer: Any) -> ToolParser:
    if name not in _PARSERS:
        raise ValueError(f"actor_rollout_ref.rollout.multi_turn.format={name!r} is not a known tool-call format; "
                         f"hybridrl has {tool_parser_names()} (register another with "
                         f"hybridrl.rollout.agent.parsers.register_tool_parser)")
    return _PARSERS[name](tokenizer)


@register_tool_parser("hermes")
class HermesToolParser:
    """`<tool_call>{"name": ..., "arguments": ...}</tool_call>` blocks (Qwen2.5, Qwen3, Hermes)."""

    START, END = "<tool_call>", "</tool_call>"
    _BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer

    @property
    def stop_token_ids(self) -> list[int]:
        # Several calls may follow each other in one turn, so `</tool_call>` must not end it: the turn ends at
        # the template's end-of-turn token (the agent loop adds it), as in verl.
        return []

    def parse(self, token_ids: list[int]) -> tuple[str, list[ToolCall]]:
        text = self.tokenizer.decode(token_ids, skip_special_tokens=False)
        if self.START not in text:
            return _strip_end_tokens(text, self.tokenizer), []
        calls = [self._call(block) for block in self._BLOCK.findall(text)]
        content = self._BLOCK.sub("", text)
        return _strip_end_tokens(content, self.tokenizer), calls

    @staticmethod
    def _call(block: str) -> ToolCall:
        try:
            data = json.loads(block)
        except json.JSONDecodeError as error:
            return ToolCall(name=_guess_name(block), parse_error=f"{error} in {block.strip()[:200]!r}")
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return ToolCall(name=_guess_name(block),
                            parse_error=f'a tool call is {{"name": ..., "arguments": {{...}}}}, got {block.strip()[:200]!r}')
        arguments = data.get("arguments", {})
        # Arguments as the model wrote them (an object), or as a JSON string some models emit.
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        return ToolCall(name=data["name"], arguments=text, tool_call_id=data.get("id"))


def _guess_name(block: str) -> str:
    match = re.search(r'"name"\s*:\s*"([^"]*)"', block)
    return match.group(1) if match else "?"


def _strip_end_tokens(text: str, tokenizer: Any) -> str:
    """The assistant text without trailing special tokens (the end-of-turn / EOS the model sampled)."""
    specials = [token for token in getattr(tokenizer, "all_special_tokens", []) if token]
    changed = True
    while changed:
        changed = False
        for token in specials:
            if text.endswith(token):
                text, changed = text[: -len(token)], True
    return text
