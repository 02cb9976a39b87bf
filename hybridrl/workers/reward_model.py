"""The reward-model role: score prompt+response with a token-classification RM, in process or over HTTP.

`rm_scores (B, R)` holds the RM's output at the last valid token, placed on the last valid response
token (verl's `RewardModelWorker.compute_rm_score`); `combine_scores` is verl's naive-manager rule.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
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
                 micro_batch_size: int = 8, devices: Sequence[str | torch.device] = ("cpu",), remote: bool = False,
                 client_kwargs: dict | None = None, max_length: int | None = None, trust_remote_code: bool = False,
                 dtype: torch.dtype = torch.float32, max_tokens: int | None = None, use_shm: bool = False):
        """`devices`: one replica of a local RM per device (reward_model.device_ids); micro-batches are dealt
        to them in turn and scored side by side. `dtype`: the frozen weights' (the compute dtype: no master copy).
        `max_tokens` (reward_model.use_dynamic_bsz): micro-batches of as many rows as fit this many tokens of the
        padded width, instead of `micro_batch_size` rows."""
        if micro_batch_size < 1:
            raise ValueError(f"reward_model.micro_batch_size_per_gpu must be >= 1, got {micro_batch_size}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"reward_model.forward_max_token_len_per_gpu must be >= 1, got {max_tokens}")
        if client_kwargs and not remote:
            raise ValueError("client_kwargs are for a remote reward model (remote=True); the local one has no client")
        if use_shm and remote:
            raise ValueError("reward_model.model.use_shm=true copies a local model to /dev/shm, but "
                             f"reward_model.model.path={redact_url(model_path_or_url)!r} is a remote endpoint; set "
                             "reward_model.model.use_shm=false")
        self.tokenizer = tokenizer
        self.input_tokenizer = input_tokenizer
        self.switch_template = input_tokenizer is not None and tokenizers_differ(input_tokenizer, tokenizer)
        self.micro_batch_size, self.max_tokens, self.max_length = micro_batch_size, max_tokens, max_length
        self.client = PoolingClient(model_path_or_url, **(client_kwargs or {})) if remote else None
        self.replicas = [] if remote else _replicas(load_value_model(
            model_path_or_url, dtype=dtype, key="reward_model.model.path", trust_remote_code=trust_remote_code,
            use_shm=use_shm).eval(),
            devices)
        self.source = redact_url(model_path_or_url) if remote else model_path_or_url

    def describe(self) -> str:
        devices = ", ".join(str(_device_of(model)) for model in self.replicas)
        dtype = str(next(self.replicas[0].parameters()).dtype).removeprefix("torch.") if self.replicas else ""
        where = f"remote at {self.source}" if self.client else f"in process from {self.source} on {devices} ({dtype})"
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

    def _local_scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      position_ids: torch.Tensor) -> torch.Tensor:
        """(B,) RM outputs at each row's last valid token, `rows_per_forward` rows per forward; micro-batch i
        runs on replica i mod len(replicas), one thread per replica when there are several."""
        rows = self.rows_per_forward(input_ids.shape[1])
        parts = [slice(start, start + rows) for start in range(0, input_ids.shape[0], rows)]
        shares = [parts[i::len(self.replicas)] for i in range(len(self.replicas))]
        jobs = [(model, share, input_ids, attention_mask, position_ids) for model, share in zip(self.replicas, shares)]
        if len(jobs) == 1:
            results = [_score_parts(*jobs[0])]
        else:
            with ThreadPoolExecutor(len(jobs), thread_name_prefix="reward-model") as pool:
                results = list(pool.map(lambda job: _score_parts(*job), jobs))
        by_part = {part.start: scores for result in results for part, scores in result}
        return torch.cat([by_part[part.start] for part in parts])

    def rows_per_forward(self, width: int) -> int:
        """`micro_batch_size`, or with a token budget as many rows of `width` tokens as it holds (at least one)."""
        return self.micro_batch_size if self.max_tokens is None else max(1, self.max_tokens // width)

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


def _replicas(model: torch.nn.Module, devices: Sequence[str | torch.device]) -> list[torch.nn.Module]:
    """The model on each device: moved to the first, copies on the others."""
    if not devices:
        raise ValueError("a local reward model needs at least one device (reward_model.device_ids)")
    first = model.to(devices[0])
    return [first] + [copy.deepcopy(first).to(device) for device in devices[1:]]


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def _score_parts(model: torch.nn.Module, parts: list[slice], input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 position_ids: torch.Tensor) -> list[tuple[slice, torch.Tensor]]:
    """Each part's RM output at its rows' last valid token, on `model`'s device, back on the CPU."""
    device, out = _device_of(model), []
    for part in parts:
        mask = attention_mask[part]
        outputs = token_scalar_outputs(model, input_ids[part].to(device), mask.to(device),
                                       position_ids[part].to(device)).cpu()
        out.append((part, outputs[torch.arange(outputs.shape[0]), last_valid_index(mask)]))
    return out
