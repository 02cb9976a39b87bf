"""A dataset class as verl's recipes write one (verl's constructor, verl >= 0.6 rows), without importing verl:
what jan_lora_shm_curriculum.sh names in data.custom_cls.path."""

import pyarrow.parquet as pq
import torch


class CustomRLHFDataset:
    def __init__(self, data_files, tokenizer, config, processor=None, max_samples=-1):
        files = data_files if isinstance(data_files, (list, tuple)) else [data_files]
        self.rows = [row for file in files for row in pq.read_table(file).to_pylist()]
        self.prompt_key = config.get("prompt_key", "prompt")

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, item):
        row = dict(self.rows[item])
        row["raw_prompt"] = row[self.prompt_key]
        row["dummy_tensor"] = torch.tensor([0], dtype=torch.uint8)
        row["index"] = (row.get("extra_info") or {}).get("index", 0)
        return row
