"""`rollout.name=hf`: transformers `generate` as a rollout backend (the reference implementation).

It generates with the trainer's own module (shared storage, so weight sync is free) and reports
per-token log-probs computed from the raw logits divided by the temperature.
"""

from __future__ import annotations

from typing import Iterable

import torch
from transformers import GenerationConfig

from hybridrl.rollout.base import RolloutOutput, SamplingParams


class HFRolloutBackend:
    def __init__(self, model: torch.nn.Module, pad_token_id: int, eos_token_ids: Iterable[int] = ()):
        self.model = model
        self.pad_token_id = pad_token_id
        self.eos_token_ids = tuple(eos_token_ids)

    def _generation_config(self, params: SamplingParams) -> GenerationConfig:
        eos = sorted(set(self.eos_token_ids) | set(params.eos_token_ids))
        sample = not params.greedy
        return GenerationConfig(
            do_sample=sample, temperature=params.temperature if sample else None,
            top_k=params.top_k if sample and params.top_k > 0 else None,
            top_p=params.top_p if sample and params.top_p < 1.0 else None,
            max_new_tokens=params.max_new_tokens, num_return_sequences=params.n,
            eos_token_id=None if params.ignore_eos or not eos else eos,
            pad_token_id=self.pad_token_id, return_dict_in_generate=True, output_logits=True,
            use_cache=True)

    def _left_pad(self, prompts: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt):] = torch.tensor(prompt)
            mask[row, width - len(prompt):] = 1
        return ids.to(device), mask.to(device)

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutOutput:
        was_training = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device
        ids, mask = self._left_pad(prompts, device)
        if params.seed is not None:  # a replica's shard (row_offset > 0) draws from its own stream
            torch.manual_seed(params.seed + (params.row_offset << 32))
        out = self.model.generate(input_ids=ids, attention_mask=mask,
                                  generation_config=self._generation_config(params))
        self.model.train(was_training)
        new_tokens = out.sequences[:, ids.shape[1]:]
        temperature = params.temperature if not params.greedy else 1.0
        logits = torch.stack(out.logits, dim=1).float() / temperature  # (B*n, T, V)
        log_probs = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        return self._trim(new_tokens.cpu(), log_probs.cpu(), params)

    def _trim(self, tokens: torch.Tensor, log_probs: torch.Tensor, params: SamplingParams) -> RolloutOutput:
        """Cut each row after its first EOS (kept), dropping HF's padding."""
        eos = set() if params.ignore_eos else set(self.eos_token_ids) | set(params.eos_token_ids)
        token_rows, logprob_rows = [], []
        for row_tokens, row_lp in zip(tokens.tolist(), log_probs.tolist()):
            end = next((i + 1 for i, t in enumerate(row_tokens) if t in eos), len(row_tokens))
            token_rows.append(row_tokens[:end])
            logprob_rows.append(row_lp[:end])
        return RolloutOutput(token_ids=token_rows, log_probs=logprob_rows)

    def update_weights(self, named_tensors) -> None:
        """Nothing to copy: this backend generates with the trainer's module itself."""

    def sleep(self) -> None:
        """No generation-only memory to free (HF's KV cache lives only inside `generate`)."""

    def wake_up(self) -> None:
        """See `sleep`."""
