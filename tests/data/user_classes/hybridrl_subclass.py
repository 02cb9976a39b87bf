"""A dataset class built on hybridrl's own RLDataset (what `data.custom_cls` may also point at)."""

from hybridrl.data.dataset import RLDataset


class SystemPromptDataset(RLDataset):
    """Every prompt gets a system message first."""

    def messages(self, i):
        return [{"role": "system", "content": "Answer briefly."}] + super().messages(i)
