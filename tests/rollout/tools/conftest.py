"""Agent-loop tests use the tiny ChatML tokenizer (tool role, Qwen's `<|im_end|>\\n` boundary)."""

import pytest


@pytest.fixture(scope="session")
def chatml_tokenizer():
    from hybridrl.models.tiny import build_char_tokenizer

    return build_char_tokenizer(chat_format="chatml")
