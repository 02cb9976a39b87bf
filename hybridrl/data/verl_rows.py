"""A dataset class written for verl (`data.custom_cls`), seen as hybridrl's prompt rows.

verl builds a custom class as `cls(data_files=, tokenizer=, config=, processor=, max_samples=)` and collates
whatever dicts its `__getitem__` returns. Its rows come in two generations:

- verl >= 0.6 (both trees hybridrl follows): the row's columns plus `raw_prompt` (chat messages), `index`,
  `tools_kwargs`, `interaction_kwargs` and a `dummy_tensor`; the chat template is applied later.
- older verl: `input_ids`, `attention_mask`, `position_ids` (left-padded to max_prompt_length), and
  `raw_prompt_ids` (the unpadded ids).

`VerlRows.__getitem__` turns either into what `dataset.collate` takes (the unpadded prompt as `input_ids`, every
other field kept for the reward step and agent loops): prompt tokens from `input_ids` (padding removed with
`attention_mask`), else `raw_prompt_ids`, else `raw_prompt` / the `data.prompt_key` column rendered with the chat
template as `RLDataset` does; `data_source` from `data.reward_fn_key`; `index` from extra_info when the row has
none; verl's placeholders (`dummy_tensor`) and the padded tensors dropped, as collate rebuilds them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hybridrl.data.dataset import TRUNCATION_MODES, has_media, render_prompt, subsample_indices, truncate_prompt_ids
from hybridrl.data.errors import DatasetError
from hybridrl.data.scan import FIXES, reward_problem

# Rebuilt by collate from the unpadded prompt, or placeholders verl's own collate needs and hybridrl's does not.
DERIVED_KEYS = ("input_ids", "attention_mask", "position_ids", "raw_prompt_ids", "dummy_tensor")
MULTIMODAL_KEYS = ("multi_modal_data", "multi_modal_inputs")


class VerlRows:
    """Rows of a user's verl-style dataset `inner`, in hybridrl's item format (see the module docstring)."""

    def __init__(self, inner: Any, tokenizer: Any, data_cfg: Any, *, label: str, require_ground_truth: bool = True,
                 keep: list[int] | None = None) -> None:
        """`label` names the class in errors ("data.custom_cls MyDataset (my_data.py)"); `keep` selects rows
        (data.*_max_samples for a class that does not take max_samples)."""
        if not (hasattr(inner, "__len__") and hasattr(inner, "__getitem__")):
            raise DatasetError(f"{label} has no __len__ / __getitem__; a dataset class must give both (verl's "
                               "torch.utils.data.Dataset contract)")
        if hasattr(inner, "on_batch_end"):
            raise DatasetError(f"{label} defines on_batch_end(batch), verl's hook for datasets that grow during "
                               "training (dynamic data generation), which hybridrl does not call: generate the rows "
                               "offline into data.train_files, or drop on_batch_end")
        if data_cfg.truncation not in TRUNCATION_MODES:
            raise DatasetError(f"data.truncation={data_cfg.truncation!r} is not a truncation mode; use one of "
                               f"{TRUNCATION_MODES}")
        self.inner, self.tokenizer, self.label = inner, tokenizer, label
        self.prompt_key, self.reward_fn_key = data_cfg.prompt_key, data_cfg.reward_fn_key
        self.max_prompt_length, self.truncation = data_cfg.max_prompt_length, data_cfg.truncation
        self.chat_template_kwargs = dict(data_cfg.apply_chat_template_kwargs or {})
        self.media_keys = (data_cfg.image_key, data_cfg.video_key, *MULTIMODAL_KEYS)
        self.require_ground_truth = require_ground_truth
        self.keep = keep
        self.prompt_lengths: list[int] = []  # unknown without tokenizing every row; the run console shows none
        self.num_filtered = 0  # data.filter_overlong_prompts is the class's own business (verl passes it config)
        if len(self) == 0:
            raise DatasetError(f"{label} has no rows; check data.train_files / data.val_files")
        self[0]  # a row format hybridrl cannot read fails here, before the first step

    def __len__(self) -> int:
        return len(self.keep) if self.keep is not None else len(self.inner)

    def __getitem__(self, i: int) -> dict[str, Any]:
        source = self.keep[i] if self.keep is not None else i
        row = self.inner[source]
        if not isinstance(row, dict):
            raise DatasetError(f"{self.label}: row {source} is a {type(row).__name__}; __getitem__ must return a dict "
                               "(verl's row: raw_prompt, data_source, reward_model, extra_info, ...)")
        self._check(row, source)
        item = {key: value for key, value in row.items() if key not in DERIVED_KEYS}
        messages = self._messages(row, source)
        if messages is not None:
            item["raw_prompt"] = messages
        item["input_ids"] = torch.tensor(self._prompt_ids(row, messages, source), dtype=torch.long)
        if self.reward_fn_key in row:
            item["data_source"] = row[self.reward_fn_key]
        if item.get("index") is None:
            extra_info = row.get("extra_info")
            index = extra_info.get("index") if isinstance(extra_info, dict) else None
            item["index"] = index if index is not None else source
        return item

    # ------------------------------------------------------------- pieces
    def _check(self, row: dict, source: int) -> None:
        for key in self.media_keys:
            if has_media(row.get(key)):
                raise DatasetError(f"{self.label}: row {source} has multimodal data in {key!r}; multimodal prompts "
                                   "are not supported by hybridrl yet, and training on their text alone would drop "
                                   "them silently; return text-only rows")
        if self.require_ground_truth:
            problem = reward_problem(row)
            if problem is not None:
                raise DatasetError(f"{self.label}: row {source}: {problem[1]}; hybridrl's reward step reads "
                                   f"reward_model.ground_truth of every row: {FIXES[problem[0]]}")

    def _messages(self, row: dict, source: int) -> list[dict] | None:
        """The row's chat messages (`raw_prompt`, else the prompt column), or None for a tokens-only row."""
        prompt = row.get("raw_prompt")
        if prompt is None:
            prompt = row.get(self.prompt_key)
        if prompt is None:
            return None
        if isinstance(prompt, str):
            return [{"role": "user", "content": prompt}]
        if isinstance(prompt, (list, tuple, np.ndarray)) and all(isinstance(m, dict) for m in prompt):
            messages = [dict(message) for message in prompt]
            if all(isinstance(m.get("content"), str) for m in messages):
                return messages
        raise DatasetError(f"{self.label}: row {source} has a prompt hybridrl cannot render ({str(prompt)[:200]!r}); "
                           "raw_prompt must be a string or a list of {'role', 'content': str} messages (structured "
                           "multimodal content is not supported)")

    def _prompt_ids(self, row: dict, messages: list[dict] | None, source: int) -> list[int]:
        if row.get("input_ids") is not None:
            ids = _unpadded(row["input_ids"], row.get("attention_mask"), f"{self.label}: row {source}")
        elif row.get("raw_prompt_ids") is not None:
            ids = [int(token) for token in row["raw_prompt_ids"]]
        elif messages is not None:
            text = render_prompt(self.tokenizer, messages, self.chat_template_kwargs)
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        else:
            raise DatasetError(f"{self.label}: row {source} has no prompt: none of raw_prompt, input_ids, "
                               f"raw_prompt_ids or the data.prompt_key column {self.prompt_key!r} (keys: "
                               f"{sorted(row)}); return the chat messages as raw_prompt, as verl's RLHFDataset does")
        if len(ids) <= self.max_prompt_length:
            return ids
        if self.truncation == "error":
            raise DatasetError(f"{self.label}: row {source} has a prompt of {len(ids)} tokens, longer than "
                               f"data.max_prompt_length={self.max_prompt_length}; raise data.max_prompt_length, drop "
                               "such rows in the class, or cut them with data.truncation=left (or right/middle)")
        return truncate_prompt_ids(ids, self.max_prompt_length, self.truncation)


def _unpadded(input_ids: Any, attention_mask: Any, where: str) -> list[int]:
    """verl's left-padded (P,) or (1, P) prompt without its padding (the positions where attention_mask is 0)."""
    ids = torch.as_tensor(input_ids).reshape(-1)
    if attention_mask is None:
        return ids.tolist()
    mask = torch.as_tensor(attention_mask).reshape(-1).bool()
    if mask.shape != ids.shape:
        raise DatasetError(f"{where}: attention_mask {tuple(mask.shape)} does not match input_ids {tuple(ids.shape)}; "
                           "return both for the same (left-padded) prompt")
    return ids[mask].tolist()


def max_samples_selection(num_rows: int, max_samples: int, seed: int | None) -> list[int] | None:
    """Rows kept for data.*_max_samples when the class cannot subsample itself (None: keep every row)."""
    if max_samples is None or max_samples < 0 or max_samples >= num_rows:
        return None
    return subsample_indices(num_rows, max_samples, seed)
