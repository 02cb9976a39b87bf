"""The RL prompt dataset (verl ≤v0.6 `RLHFDataset` semantics) and its collate function.

Rows come from parquet/jsonl files in verl's schema; `__getitem__` applies the chat template and
tokenizes one prompt; `collate` left-pads a list of rows into a `Batch`.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from hybridrl.data.errors import DatasetError
from hybridrl.data.parquet import read_rows
from hybridrl.data.scan import OVERLONG, RowProblem, prompt_lengths, raise_for_problems, reward_problem
from hybridrl.utils.batch import Batch

logger = logging.getLogger("hybridrl.data")

TRUNCATION_MODES = ("error", "left", "right", "middle")
_warned_no_chat_template: set[str] = set()


def truncate_prompt_ids(ids: list[int], max_length: int, mode: str) -> list[int]:
    """Cut `ids` to `max_length` tokens: left keeps the end, right the start, middle both ends (verl)."""
    if len(ids) <= max_length:
        return ids
    if mode == "left":
        return ids[len(ids) - max_length:]
    if mode == "right":
        return ids[:max_length]
    if mode == "middle":
        head = max_length // 2
        return ids[:head] + ids[len(ids) - (max_length - head):]
    raise DatasetError(f"truncation mode {mode!r} cannot cut a prompt; use one of {TRUNCATION_MODES[1:]}")


class RLDataset:
    """Prompts from verl-schema files; item `i` is the row's fields plus `input_ids` (unpadded 1-D LongTensor).

    Item keys besides the row's columns (the prompt column itself is replaced): `data_source` (the row's
    `reward_fn_key` column), `index` (extra_info.index, else the row number in its file), `raw_prompt`
    (the messages, with return_raw_chat).

    Construction scans every row once (`data/scan.py`): prompt lengths (`prompt_lengths`, tokenized in batches),
    and a DatasetError listing every prompt over max_prompt_length under `truncation="error"` (unless
    `filter_overlong_prompts` drops them) and, with `require_ground_truth`, every row a reward function could not
    score. So a run stops before its first step, not on the row's first use.
    """

    def __init__(self, files: str | Path | list[str | Path], tokenizer: Any, *, max_prompt_length: int = 512,
                 prompt_key: str = "prompt", reward_fn_key: str = "data_source", truncation: str = "error",
                 filter_overlong_prompts: bool = False, max_samples: int = -1, return_raw_chat: bool = False,
                 apply_chat_template_kwargs: dict | None = None, seed: int | None = None,
                 media_keys: tuple[str, ...] = ("images", "videos"), require_ground_truth: bool = False) -> None:
        if truncation not in TRUNCATION_MODES:
            raise DatasetError(f"data.truncation={truncation!r} is not a truncation mode; use one of {TRUNCATION_MODES}")
        self.files = [str(files)] if isinstance(files, (str, Path)) else [str(f) for f in files]
        if not self.files:
            raise DatasetError("no data files given; set data.train_files / data.val_files to parquet or jsonl paths")
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length
        self.prompt_key = prompt_key
        self.reward_fn_key = reward_fn_key
        self.truncation = truncation
        self.return_raw_chat = return_raw_chat
        self.apply_chat_template_kwargs = dict(apply_chat_template_kwargs or {})
        self.media_keys = media_keys
        self.num_filtered = 0
        # origins[i] = (file, row number in that file) so errors point at the exact source row.
        self.rows, self.origins = self._read_files()
        if not self.rows:
            raise DatasetError(f"the data files hold no rows: {', '.join(self.files)}; check data.train_files / "
                               f"data.val_files")
        self.prompt_lengths: list[int] = []
        self._keep(subsample_indices(len(self.rows), max_samples, seed))
        self._scan(filter_overlong_prompts, require_ground_truth)
        if filter_overlong_prompts:
            self._filter_overlong()

    # ------------------------------------------------------------- loading
    def _read_files(self) -> tuple[list[dict], list[tuple[str, int]]]:
        rows, origins = [], []
        for file in self.files:
            file_rows = read_rows(file)
            for number, row in enumerate(file_rows):
                self._check_prompt(row, file, number)
            rows.extend(file_rows)
            origins.extend((file, number) for number in range(len(file_rows)))
        return rows, origins

    def _check_prompt(self, row: dict, file: str, number: int) -> None:
        for key in self.media_keys:
            if has_media(row.get(key)):
                raise DatasetError(f"{file}: row {number} has media in column {key!r} (data.image_key / data.video_key): "
                                 "multimodal prompts are not supported by hybridrl yet, and training on their text "
                                 "alone would drop them silently; remove the column or these rows")
        prompt = row.get(self.prompt_key)
        if prompt is None:
            raise DatasetError(f"{file}: row {number} has no {self.prompt_key!r} column (columns: {sorted(row)}); "
                             f"set data.prompt_key to the column holding the prompt")
        if isinstance(prompt, str):
            return
        if not isinstance(prompt, (list, tuple, np.ndarray)) or not all(
                isinstance(m, dict) and isinstance(m.get("content"), str) for m in prompt):
            raise DatasetError(f"{file}: row {number} column {self.prompt_key!r} must be a string or a list of "
                             f"{{'role', 'content'}} messages, got {str(prompt)[:200]!r}")

    def _keep(self, indices: list[int]) -> None:
        self.rows = [self.rows[i] for i in indices]
        self.origins = [self.origins[i] for i in indices]
        if self.prompt_lengths:
            self.prompt_lengths = [self.prompt_lengths[i] for i in indices]

    def _scan(self, filter_overlong: bool, require_ground_truth: bool) -> None:
        """Prompt lengths of every row, and one error naming every row the run would fail on (data/scan.py)."""
        texts = [self._render(self.messages(i)) for i in range(len(self.rows))]
        self.prompt_lengths = prompt_lengths(texts, self.tokenizer)
        problems = []
        if self.truncation == "error" and not filter_overlong:
            problems += [RowProblem(OVERLONG, *self.origins[i], f"{length} tokens")
                         for i, length in enumerate(self.prompt_lengths) if length > self.max_prompt_length]
        if require_ground_truth:
            for i, row in enumerate(self.rows):
                found = reward_problem(row)
                if found is not None:
                    problems.append(RowProblem(found[0], *self.origins[i], found[1]))
        raise_for_problems(problems, len(self.rows), max_prompt_length=self.max_prompt_length)

    def _filter_overlong(self) -> None:
        kept = [i for i, length in enumerate(self.prompt_lengths) if length <= self.max_prompt_length]
        self.num_filtered = len(self.rows) - len(kept)
        logger.info("filtered %d of %d prompts longer than data.max_prompt_length=%d (files: %s)",
                    self.num_filtered, len(self.rows), self.max_prompt_length, ", ".join(self.files))
        self._keep(kept)

    # ------------------------------------------------------------- items
    def __len__(self) -> int:
        return len(self.rows)

    def messages(self, i: int) -> list[dict]:
        """Row `i`'s prompt as chat messages (a plain string becomes one user message)."""
        prompt = self.rows[i][self.prompt_key]
        if isinstance(prompt, str):
            return [{"role": "user", "content": prompt}]
        return [dict(message) for message in prompt]

    def prompt_token_ids(self, i: int, truncate: bool = True) -> list[int]:
        """Row `i`'s chat-templated prompt tokens, cut to max_prompt_length per `truncation` when `truncate`."""
        text = self._render(self.messages(i))
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if not truncate or len(ids) <= self.max_prompt_length:
            return ids
        if self.truncation == "error":
            file, number = self.origins[i]
            raise DatasetError(
                f"{file}: row {number} has a prompt of {len(ids)} tokens, longer than data.max_prompt_length="
                f"{self.max_prompt_length}; raise data.max_prompt_length, drop such rows with "
                f"data.filter_overlong_prompts=True, or cut them with data.truncation=left (or right/middle)")
        return truncate_prompt_ids(ids, self.max_prompt_length, self.truncation)

    def _render(self, messages: list[dict]) -> str:
        return render_prompt(self.tokenizer, messages, self.apply_chat_template_kwargs)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.rows[i]
        item = {key: value for key, value in row.items() if key != self.prompt_key}
        item["input_ids"] = torch.tensor(self.prompt_token_ids(i), dtype=torch.long)
        if self.return_raw_chat:
            item["raw_prompt"] = self.messages(i)
        item["data_source"] = row.get(self.reward_fn_key)
        extra_info = row.get("extra_info")
        has_index = isinstance(extra_info, dict) and extra_info.get("index") is not None
        item["index"] = extra_info["index"] if has_index else self.origins[i][1]
        return item

    def collate_fn(self) -> Callable[[list[dict]], Batch]:
        """`collate` bound to this dataset's max_prompt_length and the tokenizer's pad id (eos when it has none)."""
        pad_token_id = self.tokenizer.pad_token_id
        if pad_token_id is None:
            pad_token_id = self.tokenizer.eos_token_id
        if pad_token_id is None:
            raise DatasetError("the tokenizer has neither a pad token nor an eos token; set tokenizer.pad_token first")
        return functools.partial(collate, pad_token_id=pad_token_id, max_prompt_length=self.max_prompt_length)


def render_prompt(tokenizer: Any, messages: list[dict], chat_template_kwargs: dict | None = None) -> str:
    """The prompt text the policy sees: the chat template with the generation prompt, or (a tokenizer without a
    template) the message contents joined by newlines."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                             **(chat_template_kwargs or {}))
    # Base models often ship without a template: plain newline-joined contents keep them usable.
    name = type(tokenizer).__name__
    if name not in _warned_no_chat_template:
        _warned_no_chat_template.add(name)
        logger.warning("tokenizer %s has no chat template; prompts are the message contents joined by newlines", name)
    return "\n".join(message["content"] for message in messages)


def subsample_indices(num_rows: int, max_samples: int, seed: int | None) -> list[int]:
    """A seeded random subset of `max_samples` rows (sorted, so file order is kept); all rows when -1 or too few."""
    if max_samples is None or max_samples < 0 or max_samples >= num_rows:
        return list(range(num_rows))
    # seed None still means reproducible: a run's subset should not change when it is restarted.
    rng = np.random.default_rng(0 if seed is None else seed)
    return sorted(rng.choice(num_rows, size=max_samples, replace=False).tolist())


def _object_array(values: list[Any]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):  # element-wise: equal-length lists must not become a 2-D array
        array[i] = value
    return array


def collate(rows: list[dict[str, Any]], pad_token_id: int, max_prompt_length: int) -> Batch:
    """Left-pad rows' `input_ids` to (B, P=max_prompt_length) + attention_mask, position_ids; the rest → non-tensors.

    position_ids = clip(cumsum(attention_mask) - 1, 0), so the first real token is at position 0. A field
    missing from some rows is None there.
    """
    if not rows:
        raise ValueError("collate got no rows; the batch size must be at least 1")
    input_ids = torch.full((len(rows), max_prompt_length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), max_prompt_length), dtype=torch.long)
    for i, row in enumerate(rows):
        ids = torch.as_tensor(row["input_ids"], dtype=torch.long)
        if ids.numel() > max_prompt_length:
            raise ValueError(f"row {i} has {ids.numel()} prompt tokens but the batch is padded to max_prompt_length="
                             f"{max_prompt_length}; build the dataset with the same data.max_prompt_length")
        if ids.numel():
            input_ids[i, max_prompt_length - ids.numel():] = ids
            attention_mask[i, max_prompt_length - ids.numel():] = 1
    position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)
    keys = list(dict.fromkeys(key for row in rows for key in row if key != "input_ids"))
    non_tensors = {key: _object_array([row.get(key) for row in rows]) for key in keys}
    tensors = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
    return Batch(tensors=tensors, non_tensors=non_tensors)


def has_media(value: Any) -> bool:
    """A non-empty images/videos cell: None, NaN (a missing cell), "" and empty lists or arrays are none."""
    if value is None or (isinstance(value, float) and value != value):
        return False
    if isinstance(value, (str, list, tuple, np.ndarray)):
        return len(value) > 0
    return True
