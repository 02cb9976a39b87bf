"""Dataset and sampler classes written the way verl users write them (verl's constructor contracts and row
formats), without importing verl: what `data.custom_cls` / `data.sampler` point at in tests/data."""

import pyarrow.parquet as pq
import torch


def _read(data_files):
    files = data_files if isinstance(data_files, (list, tuple)) else [data_files]
    rows = []
    for file in files:
        rows += pq.read_table(file).to_pylist()
    return rows


class RawPromptDataset:
    """verl >= 0.6 RLHFDataset rows: the columns plus raw_prompt, index, tools_kwargs and a dummy_tensor."""

    def __init__(self, data_files, tokenizer, config, processor=None, max_samples=-1):
        self.prompt_key = config.get("prompt_key", "prompt")
        self.need_tools_kwargs = config.get("need_tools_kwargs", False)
        self.rows = _read(data_files)
        if max_samples > 0:
            self.rows = self.rows[:max_samples]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, item):
        row_dict = dict(self.rows[item])
        row_dict["raw_prompt"] = row_dict[self.prompt_key]
        row_dict["dummy_tensor"] = torch.tensor([0], dtype=torch.uint8)
        extra_info = row_dict.get("extra_info") or {}
        row_dict["index"] = extra_info.get("index", 0)
        row_dict["tools_kwargs"] = extra_info.get("tools_kwargs", {})
        row_dict["interaction_kwargs"] = extra_info.get("interaction_kwargs", {})
        return row_dict


class PaddedPromptDataset:
    """Older verl rows: the chat-templated prompt left-padded to max_prompt_length with its mask, and
    raw_prompt_ids; no max_samples parameter (hybridrl subsamples for it)."""

    def __init__(self, data_files, tokenizer, config, **kwargs):
        self.tokenizer = tokenizer
        self.length = config.max_prompt_length
        self.rows = _read(data_files)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, item):
        row = dict(self.rows[item])
        messages = row.pop("prompt")
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        pad = self.length - len(ids)
        row["input_ids"] = torch.tensor([self.tokenizer.pad_token_id] * pad + ids)
        row["attention_mask"] = torch.tensor([0] * pad + [1] * len(ids))
        row["position_ids"] = (row["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        row["raw_prompt_ids"] = ids
        return row


class GrowingDataset(RawPromptDataset):
    """verl's dynamic data generation hook, which hybridrl refuses rather than never calling it."""

    def on_batch_end(self, batch):
        self.rows.append(self.rows[0])


class NoGroundTruthDataset(RawPromptDataset):
    def __getitem__(self, item):
        row = super().__getitem__(item)
        row["reward_model"] = {"style": "rule"}
        return row


class SeededShuffleSampler:
    """A plain verl sampler (AbstractSampler's constructor): a permutation seeded by data.seed and the epoch."""

    def __init__(self, data_source, data_config):
        self.size = len(data_source)
        self.seed = data_config.get("seed") or 0
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 1000 + self.epoch)
        return iter(torch.randperm(self.size, generator=generator).tolist())

    def __len__(self):
        return self.size


class ReplayFailuresCurriculum:
    """An AbstractCurriculumSampler: rows in file order, but a row that scored below 0.5 is drawn again next.
    Indices are drawn lazily, so update(batch) after a step changes what the next step draws. Keeps its state
    (position in the epoch) for an exact resume."""

    def __init__(self, data_source, data_config):
        self.size = len(data_source)
        self.retry = []
        self.position = 0  # the next row in file order
        self.drawn = 0  # indices drawn in this epoch
        self.updates = 0

    def __iter__(self):
        if self.drawn >= self.size:  # the last epoch is over: a new one starts
            self.drawn, self.position = 0, 0
        while self.drawn < self.size:
            pick = self.retry.pop(0) if self.retry else self.position
            if pick == self.position:
                self.position += 1
            self.drawn += 1
            yield pick

    def __len__(self):
        return self.size

    def update(self, batch):
        self.updates += 1
        scores = batch.batch["token_level_scores"].sum(-1).tolist()
        self.retry += [int(index) for index, score in zip(batch.non_tensor_batch["index"], scores) if score < 0.5]

    def state_dict(self):
        return {"retry": list(self.retry), "position": self.position, "drawn": self.drawn, "updates": self.updates}

    def load_state_dict(self, state):
        self.retry, self.position = list(state["retry"]), state["position"]
        self.drawn, self.updates = state["drawn"], state["updates"]


class ForgetfulCurriculum(ReplayFailuresCurriculum):
    """A curriculum sampler without state_dict: hybridrl warns that its curriculum restarts on resume."""

    state_dict = None
    load_state_dict = None
