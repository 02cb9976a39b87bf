"""A frozen critic served over HTTP (`hybridrl serve --kind value`): values come from the server's
per-token outputs with verl's shift; `update_critic` changes nothing and reports `critic/frozen`.
"""

from __future__ import annotations

from hybridrl.rewards.remote import shifted_response_values, valid_token_rows
from hybridrl.serving.client import PoolingClient
from hybridrl.utils.batch import Batch


class RemoteCriticWorker:
    def __init__(self, url: str, client_kwargs: dict | None = None):
        self.client = PoolingClient(url, **(client_kwargs or {}))

    def describe(self) -> str:
        return f"critic: frozen remote value model at {self.client.base_url}"

    def compute_values(self, batch: Batch) -> Batch:
        """`values` (B, R): the output at padded column P-1+t for response token t, times response_mask."""
        response_mask = batch["response_mask"]
        prompt_len = batch["input_ids"].shape[1] - response_mask.shape[1]
        rows, starts = valid_token_rows(batch["input_ids"], batch["attention_mask"])
        outputs = self.client.pool(rows)
        return Batch({"values": shifted_response_values(outputs, starts, prompt_len, response_mask)})

    def update_critic(self, batch: Batch) -> dict[str, float]:
        """No update: the remote value model is frozen, and the metrics say so."""
        return {"critic/frozen": 1.0}

    def save_checkpoint(self, role_dir: str, contents: list[str]) -> None:
        """Nothing to save: a frozen remote model has no state here (checkpoints have no critic folder)."""

    def load_checkpoint(self, role_dir: str, contents: list[str]) -> None:
        """Nothing to load (see `save_checkpoint`)."""
