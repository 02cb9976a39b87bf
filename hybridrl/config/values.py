"""Parse the value side of a Hydra-style override: `1`, `1e-6`, `null`, `True`, `'x'`, `[a,b]`, `{x:1}`, `${a.b}`."""

from __future__ import annotations

import re
from typing import Any

from hybridrl.config.errors import ConfigError

_INT = re.compile(r"[+-]?\d[\d_]*")
_FLOAT = re.compile(r"[+-]?(\d[\d_]*\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", re.IGNORECASE)
_CLOSERS = {"[": "]", "{": "}"}


def parse_scalar(text: str) -> Any:
    """An unquoted scalar as Hydra reads it: null, true/false (any case), int, float, else the string."""
    text = text.strip()
    lowered = text.lower()
    if lowered == "null":
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    if _INT.fullmatch(text):
        return int(text.replace("_", ""))
    if _FLOAT.fullmatch(text) and any(c.isdigit() for c in text) or lowered.lstrip("+-") in ("inf", "nan"):
        return float(text.replace("_", ""))
    return text


class _Parser:
    """A small recursive-descent reader of Hydra's value grammar (lists, dicts, quotes, interpolations)."""

    def __init__(self, text: str, key: str) -> None:
        self.text, self.key, self.pos = text, key, 0

    def fail(self, why: str) -> ConfigError:
        return ConfigError(f"cannot parse the value of '{self.key}' ({self.text!r}): {why}")

    def skip_spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def element(self, stops: str) -> Any:
        self.skip_spaces()
        char = self.peek()
        if char in _CLOSERS:
            return self.container()
        if char in "'\"":
            return self.quoted()
        return parse_scalar(self.bare(stops))

    def container(self) -> Any:
        opener = self.text[self.pos]
        closer = _CLOSERS[opener]
        self.pos += 1
        items: list[Any] = []
        mapping: dict[Any, Any] = {}
        self.skip_spaces()
        if self.peek() == closer:
            self.pos += 1
            return items if opener == "[" else mapping
        while True:
            if opener == "[":
                items.append(self.element(",]"))
            else:
                key = self.element(":}")
                self.expect(":")
                mapping[key] = self.element(",}")
            self.skip_spaces()
            char = self.peek()
            self.pos += 1
            if char == closer:
                return items if opener == "[" else mapping
            if char != ",":
                raise self.fail(f"expected ',' or '{closer}' at position {self.pos - 1}")

    def expect(self, char: str) -> None:
        self.skip_spaces()
        if self.peek() != char:
            raise self.fail(f"expected '{char}' at position {self.pos}")
        self.pos += 1

    def quoted(self) -> str:
        quote = self.text[self.pos]
        end = self.text.find(quote, self.pos + 1)
        if end < 0:
            raise self.fail(f"unterminated {quote} quote")
        value = self.text[self.pos + 1 : end]
        self.pos = end + 1
        return value

    def bare(self, stops: str) -> str:
        """Unquoted text up to a stop character; `${...}` spans are kept whole."""
        start, depth = self.pos, 0
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if self.text.startswith("${", self.pos):
                depth += 1
                self.pos += 1
            elif char == "}" and depth:
                depth -= 1
            elif char in stops and not depth:
                break
            self.pos += 1
        return self.text[start : self.pos]


def parse_value(text: str, key: str = "<value>") -> Any:
    """The Python value of an override's right-hand side. `key` only names the override in errors."""
    parser = _Parser(text, key)
    stripped = text.strip()
    if stripped[:1] in _CLOSERS or (stripped[:1] in "'\"" and len(stripped) > 1):
        parser.pos = text.index(stripped[0])
        value = parser.element("")
        parser.skip_spaces()
        if parser.pos != len(text):
            raise parser.fail(f"unexpected text after position {parser.pos}")
        return value
    if "," in stripped and "${" not in stripped:
        raise ConfigError(
            f"ambiguous value for '{key}' ({text!r}): a comma-separated value is a Hydra sweep; "
            f"write a list as {key}='[{stripped}]' or quote a string as {key}='\"{stripped}\"'"
        )
    return parse_scalar(text)
