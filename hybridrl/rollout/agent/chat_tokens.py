"""Continuous tokens: a trajectory's token stream only ever grows, and nothing the model sampled is re-tokenized.

verl's Continuous Token approach (verl PR #6779): re-rendering the whole conversation each turn does
not reproduce the sampled ids (decode->encode is not invertible, templates rewrite assistant turns), so
the stream is prompt ids + each turn's sampled ids verbatim + the tokens of what the framework adds:
- tool / user messages are rendered as a suffix diff: render(fixed synthetic prefix + new messages) minus
  render(fixed synthetic prefix), at token level (the prefix ids must be a prefix of the full ids);
- the generation prompt is the diff between rendering with and without `add_generation_prompt`;
- a model-family boundary hook closes the assistant turn the way the template would render it: Qwen's
  templates render `<|im_end|>\\n` but generation stops at `<|im_end|>`, so the `\\n` is inserted.
Only sampled ids are trained on; everything inserted here is mask 0 (see stream.py).
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("hybridrl.rollout.agent")

_SYNTHETIC_SYSTEM = {"role": "system", "content": "continuous token synthetic system"}
_SYNTHETIC_USER = {"role": "user", "content": "continuous token synthetic user"}
_SYNTHETIC_ASSISTANT = {"role": "assistant", "content": "continuous token synthetic assistant"}
# HF `config.model_type`s whose templates are ChatML with `<|im_end|>\n` after every turn (Qwen2, 2.5, 3).
CHATML_MODEL_TYPES = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next", "qwen2_5_vl", "qwen2_vl", "qwen3_vl")


class TurnBoundary:
    """How an assistant turn is closed in the rendered conversation: `closing_ids` follow the content (Qwen:
    `<|im_end|>`, `\\n`). Generation stops at the first of them (`stop_ids`); `glue_after` returns the rest."""

    def __init__(self, closing_ids: list[int], family: str):
        self.closing_ids = list(closing_ids)
        self.family = family

    @property
    def stop_ids(self) -> list[int]:
        return self.closing_ids[:1]

    def glue_after(self, sampled_ids: list[int]) -> list[int]:
        """The closing tokens missing after `sampled_ids`: the longest start of `closing_ids` the model
        already sampled is kept, the remainder inserted (Qwen: stopped at `<|im_end|>` -> `\\n`)."""
        closing = self.closing_ids
        for kept in range(min(len(closing), len(sampled_ids)), 0, -1):
            if sampled_ids[len(sampled_ids) - kept:] == closing[:kept]:
                return closing[kept:]
        return list(closing)


class ChatRenderer:
    """The tokenizer's chat template as token ids: the first prompt, observation suffixes and turn boundaries.

    `chat_template_kwargs`: `data.apply_chat_template_kwargs` (e.g. enable_thinking). `model_type`: the HF
    config's model_type, choosing the boundary hook (Qwen2/2.5/3: ChatML; others: derived from the template)."""

    def __init__(self, tokenizer: Any, chat_template_kwargs: dict | None = None, model_type: str | None = None):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("agent loops render conversations with the tokenizer's chat template, and this tokenizer "
                             "has none; set actor_rollout_ref.model.custom_chat_template (a Jinja template)")
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.synthetic_head = self._synthetic_head()
        self.boundary = self._boundary(model_type)

    # ------------------------------------------------------------ rendering
    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def render_text(self, messages: list[dict], *, add_generation_prompt: bool, tools: list[dict] | None = None) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  **self.chat_template_kwargs)

    def render_ids(self, messages: list[dict], *, add_generation_prompt: bool, tools: list[dict] | None = None) -> list[int]:
        return self.encode(self.render_text(messages, add_generation_prompt=add_generation_prompt, tools=tools))

    def initial_prompt(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        return self.render_ids(messages, add_generation_prompt=True, tools=tools)

    def suffix_ids(self, prefix: list[dict], appended: list[dict], *, add_generation_prompt: bool = False,
                   tools: list[dict] | None = None) -> list[int]:
        """Token ids `appended` adds after `prefix` (and the generation prompt when asked)."""
        prefix_ids = self.render_ids(prefix, add_generation_prompt=False, tools=tools)
        full_ids = self.render_ids(prefix + appended, add_generation_prompt=add_generation_prompt, tools=tools)
        if full_ids[: len(prefix_ids)] != prefix_ids:
            roles = [message.get("role") for message in appended] or ["generation prompt"]
            raise ValueError(f"the chat template is not append-only for {roles}: rendering them after a conversation "
                             f"changes the conversation's tokens, so continuous tokens cannot be built; use a template "
                             f"that renders earlier turns unchanged (actor_rollout_ref.model.custom_chat_template)")
        return full_ids[len(prefix_ids):]

    def observation_ids(self, messages: list[dict], tools: list[dict] | None = None) -> tuple[list[int], list[int]]:
        """(the tokens of appended tool/user/system `messages`, the generation prompt after them), each a suffix
        diff against the fixed synthetic prefix (ending on an assistant turn before user messages, so templates that
        require alternating roles accept it); consecutive tool messages form one group as templates join them."""
        prefix = list(self.synthetic_head)
        if messages and messages[0].get("role") == "tool":
            prefix = prefix + [_synthetic_tool_caller(messages)]
        elif messages and messages[0].get("role") == "user":  # a simulated user answers an assistant turn
            prefix = prefix + [_SYNTHETIC_ASSISTANT]
        body = self.suffix_ids(prefix, messages, tools=tools)
        generation_prompt = self.suffix_ids(prefix + messages, [], add_generation_prompt=True, tools=tools)
        return body, generation_prompt

    def _synthetic_head(self) -> list[dict]:
        """The synthetic conversation observations are diffed against: system + user, or only a user message for
        templates that refuse a system role (Gemma's raise)."""
        try:
            self.render_text([_SYNTHETIC_SYSTEM, _SYNTHETIC_USER], add_generation_prompt=False)
        except Exception:  # jinja2's TemplateError, or the template's own raise_exception
            return [_SYNTHETIC_USER]
        return [_SYNTHETIC_SYSTEM, _SYNTHETIC_USER]

    # ------------------------------------------------------------ boundaries
    def _boundary(self, model_type: str | None) -> TurnBoundary:
        if model_type in CHATML_MODEL_TYPES:
            return TurnBoundary(self._single_ids(["<|im_end|>", "\n"], model_type), family="chatml")
        closing = self._derived_closing()
        return TurnBoundary(closing, family="derived")

    def _single_ids(self, texts: list[str], model_type: str) -> list[int]:
        ids = [self.encode(text) for text in texts]
        if any(len(piece) != 1 for piece in ids):
            raise ValueError(f"model_type={model_type!r} is treated as a ChatML (Qwen) model, but its tokenizer does "
                             f"not encode {texts} as one token each (got {ids})")
        return [piece[0] for piece in ids]

    def _derived_closing(self) -> list[int]:
        """What the template renders after an assistant message's content (Llama 3: `<|eot_id|>`)."""
        sentinel = "hybridrl continuous token sentinel"
        user = [{"role": "user", "content": "continuous token synthetic user"}]
        prompt = self.render_text(user, add_generation_prompt=True)
        full = self.render_text(user + [{"role": "assistant", "content": sentinel}], add_generation_prompt=False)
        if not full.startswith(prompt) or not full[len(prompt):].startswith(sentinel):
            logger.warning("cannot tell from the chat template how an assistant turn ends (it does not render the "
                           "assistant's text right after the generation prompt); tool observations follow the "
                           "sampled tokens directly")
            return []
        return self.encode(full[len(prompt) + len(sentinel):])


def _synthetic_tool_caller(tool_messages: list[dict]) -> dict:
    """An assistant message whose tool calls the (leading) tool messages answer, for templates that check."""
    calls = []
    for index, message in enumerate(tool_messages):
        if message.get("role") != "tool":
            break
        call = {"type": "function", "function": {"name": message.get("name") or "continuous_token_tool", "arguments": {}}}
        call["id"] = message.get("tool_call_id") or f"call_{index}"
        calls.append(call)
    return {"role": "assistant", "content": "", "tool_calls": calls}
