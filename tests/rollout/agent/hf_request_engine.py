"""A minimal `RequestEngine` over transformers' `generate`, for end-to-end agent-loop tests on a real model.

Requests run one at a time (an asyncio lock; generation in a worker thread). Log-probs are taken from the
logits divided by the temperature (the temperature-1 distribution when greedy), as the hf backend does.
"""

from __future__ import annotations

import asyncio

import torch
from transformers import GenerationConfig

from hybridrl.rollout.base import SamplingParams, TokenOutput


class HFRequestEngine:
    def __init__(self, model: torch.nn.Module, pad_token_id: int, eos_token_ids: tuple[int, ...] = ()):
        self.model = model.eval()
        self.pad_token_id = pad_token_id
        self.eos_token_ids = tuple(eos_token_ids)
        self._lock = asyncio.Lock()

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> TokenOutput:
        async with self._lock:
            return await asyncio.to_thread(self._generate, list(prompt_ids), params)

    async def abort(self, request_id: str) -> TokenOutput | None:
        return None

    @torch.no_grad()
    def _generate(self, prompt_ids: list[int], params: SamplingParams) -> TokenOutput:
        stops = sorted(set(self.eos_token_ids) | set(params.eos_token_ids) | set(params.stop_token_ids))
        sample = not params.greedy
        config = GenerationConfig(do_sample=sample, temperature=params.temperature if sample else None,
                                  max_new_tokens=params.max_new_tokens, eos_token_id=stops or None,
                                  pad_token_id=self.pad_token_id, return_dict_in_generate=True, output_logits=True)
        if params.seed is not None:
            torch.manual_seed(params.seed + params.row_offset)
        out = self.model.generate(input_ids=torch.tensor([prompt_ids]), generation_config=config)
        tokens = out.sequences[0, len(prompt_ids):].tolist()
        logits = torch.stack(out.logits, dim=1)[0].float() / (params.temperature if sample else 1.0)
        log_probs = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1)
        end = next((i + 1 for i, token in enumerate(tokens) if token in stops), None)
        tokens = tokens[: end or len(tokens)]
        return TokenOutput(token_ids=tokens, log_probs=log_probs[: len(tokens)].tolist(),
                           stop_reason="stop" if end is not None else "length")


class ScriptedFirstTurn:
    """Turn 0 of each trajectory is `text` (with the model's own log-probs for it, teacher-forced); later
    turns come from `engine`. Lets a random-weight model take a tool-call path."""

    def __init__(self, engine: HFRequestEngine, tokenizer, text: str):
        self.engine, self.tokenizer, self.text = engine, tokenizer, text

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> TokenOutput:
        if not request_id.endswith("-0"):
            return await self.engine.generate(request_id, prompt_ids, params)
        tokens = self.tokenizer(self.text, add_special_tokens=False)["input_ids"]
        return TokenOutput(token_ids=tokens, log_probs=teacher_forced_log_probs(self.engine.model, prompt_ids, tokens),
                           stop_reason="stop")

    async def abort(self, request_id: str) -> TokenOutput | None:
        return None


@torch.no_grad()
def teacher_forced_log_probs(model: torch.nn.Module, prefix: list[int], tokens: list[int]) -> list[float]:
    """log p(tokens[t] | prefix + tokens[:t]) under `model` at temperature 1."""
    ids = torch.tensor([prefix + tokens])
    logits = model(input_ids=ids).logits[0, len(prefix) - 1: -1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1).tolist()
