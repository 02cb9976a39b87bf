"""The reward-model role: score prompt+response with a token-classification RM, in process or over HTTP.

`rm_scores (B, R)` holds the RM's output at the last valid token, placed on the last valid response
token (verl's `RewardModelWorker.compute_rm_score`); `combine_scores` is verl's naive-manager rule.
"""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.models.hf import load_value_model
from hybridrl.rewards.manager import place_scores
from hybridrl.rewards.remote import last_token_scores, valid_token_rows
from hybridrl.serving.client import PoolingClient, redact_url
from hybridrl.serving.scorer import pad_right, token_scalar_outputs
from hybridrl.utils.batch import Batch


def tokenizers_differ(first: Any, second: Any) -> bool:
    """True unless both tokenizers map text to the same ids and render chats the same way."""
    if first is second:
        return False
    return first.get_vocab() != second.get_vocab() or first.chat_template != second.chat_template


def combine_scores(rule_scores: torch.Tensor | None, rm_scores: torch.Tensor | None) -> torch.Tensor:
    """verl's naive reward manager: `rm_scores` when present (rule scores are then not used), else rule scores.

    verl returns `data.batch["rm_scores"]` before running any rule function, so the trainer can skip
    rule scoring entirely when a reward model is enabled.
    """
    if rm_scores is not None:
        return rm_scores
    if rule_scores is None:
        raise ValueError("no reward to use: neither rule scores nor rm_scores were computed; enable "
                         "reward_model.enable or give a rule reward (data_source / custom_reward_function)")
    return rule_scores


def last_valid_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B,) column of each row's last 1 in a (B, T) mask."""
    width = attention_mask.shape[1]
    return width - 1 - attention_mask.flip(-1).to(torch.long).argmax(-1)


class RewardModelWorker:
    """`tokenizer` is the RM's; `input_tokenizer` (the actor's) triggers re-rendering when it differs."""

    def __init__(self, model_path_or_url: str, *, tokenizer: Any, input_tokenizer: Any = None,
                 micro_batch_size: int = 8, device: str | torch.device = "cpu", remote: bool = False,
                 client_kwargs: dict | None = None, max_length: int | None = None, trust_remote_code: bool = False):
        if micro_batch_size < 1:
            raise ValueError(f"reward_model.micro_batch_size_per_gpu must be >= 1, got {micro_batch_size}")
        if client_kwargs and not remote:
            raise ValueError("client_kwargs are for a remote reward model (remote=True); the local one has no client")
        self.tokenizer = tokenizer
        self.input_tokenizer = input_tokenizer
        self.switch_template = input_tokenizer is not None and tokenizers_differ(input_tokenizer, tokenizer)
        self.micro_batch_size, self.device, self.max_length = micro_batch_size, device, max_length
        self.client = PoolingClient(model_path_or_url, **(client_kwargs or {})) if remote else None
        self.model = None if remote else load_value_model(
            model_path_or_url, key="reward_model.model.path", trust_remote_code=trust_remote_code).to(device).eval()
        self.source = redact_url(model_path_or_url) if remote else model_path_or_url

    def describe(self) -> str:
        where = f"remote at {self.source}" if self.client else f"in process from {self.source}"
        return f"reward model: {where}" + (" (re-rendered with the RM's chat template)" if self.switch_template else "")

    def compute_rm_score(self, batch: Batch) -> Batch:
        """Batch with `rm_scores` (B, R) float32: the sequence score on the last valid response token."""
        response_len = batch["responses"].shape[1]
        prompt_len = batch["input_ids"].shape[1] - response_len
        scores = self._sequence_scores(batch)
        lengths = batch["attention_mask"][:, prompt_len:].sum(-1)
        return Batch({"rm_scores": place_scores(scores.tolist(), lengths, response_len)})

    def _sequence_scores(self, batch: Batch) -> torch.Tensor:
        if self.switch_template:
            rows = self._rerender(batch)
        elif self.client is not None:
            rows, _ = valid_token_rows(batch["input_ids"], batch["attention_mask"])
        else:
            mask = batch["attention_mask"]
            positions = batch.get("position_ids")
            if positions is None or positions.dim() != 2:
                positions = (mask.cumsum(-1) - 1).clamp(min=0)
            return self._local_scores(batch["input_ids"], mask, positions)
        if self.client is not None:
            return last_token_scores(self.client.pool(rows))
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return self._local_scores(*pad_right(rows, pad_id))

    @torch.no_grad()
    def _local_scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      position_ids: torch.Tensor) -> torch.Tensor:
        """(B,) RM outputs at each row's last valid token, `micro_batch_size` rows per forward."""
        scores = []
        for start in range(0, input_ids.shape[0], self.micro_batch_size):
            part = slice(start, start + self.micro_batch_size)
            mask = attention_mask[part]
            outputs = token_scalar_outputs(self.model, input_ids[part].to(self.device), mask.to(self.device),
                                           position_ids[part].to(self.device)).cpu()
            scores.append(outputs[torch.arange(outputs.shape[0]), last_valid_index(mask)])
        return torch.cat(scores)

    def _rerender(self, batch: Batch) -> list[list[int]]:
        """verl's `_switch_chat_template`: actor ids → text → the RM's chat template → RM ids (unpadded)."""
        responses, mask = batch["responses"], batch["attention_mask"]
        prompt_len = batch["input_ids"].shape[1] - responses.shape[1]
        raw_prompts = batch.get("raw_prompt")
        rows = []
        for i in range(len(batch)):
            num_response = int(mask[i, prompt_len:].sum())
            response = self.input_tokenizer.decode(responses[i, :num_response].tolist())
            response = response.replace(self.input_tokenizer.eos_token or "\0", "")  # verl strips EOS only
            if raw_prompts is not None:
                chat = list(raw_prompts[i]) + [{"role": "assistant", "content": response}]
                text = self.tokenizer.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
            else:  # no raw chat: the actor-rendered prompt text, special tokens dropped, then the response
                prompt_ids = batch["input_ids"][i, :prompt_len][mask[i, :prompt_len].bool()]
                text = self.input_tokenizer.decode(prompt_ids.tolist(), skip_special_tokens=True) + response
            rows.append(self._tokenize(text, i))
        return rows

    def _tokenize(self, text: str, row: int) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError(f"row {row} re-rendered to an empty text for the reward model")
        if self.max_length is not None and len(ids) > self.max_length:
            raise ValueError(f"row {row} is {len(ids)} RM tokens after re-rendering, over reward_model.max_length="
                             f"{self.max_length}; raise reward_model.max_length (truncating would score a cut text)")
        return ids
