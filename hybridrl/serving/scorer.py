"""Per-token scalar outputs of a token-classification model (`num_labels=1`: a value or reward model).

Shared by the pooling server and the in-process reward model so both run the same forward pass.
"""

from __future__ import annotations

import torch


def pad_right(token_ids: list[list[int]], pad_id: int,
              device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids), each (B, T_max), sequences right-padded with `pad_id`."""
    width = max(len(row) for row in token_ids)
    ids = torch.full((len(token_ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(token_ids), width), dtype=torch.long)
    for i, row in enumerate(token_ids):
        ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, :len(row)] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


@torch.no_grad()
def token_scalar_outputs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         position_ids: torch.Tensor) -> torch.Tensor:
    """(B, T) float32: the model's single-label output at every position (padding positions included)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   use_cache=False).logits
    if logits.shape[-1] != 1:
        raise ValueError(f"expected a token-classification model with one label (num_labels=1); its output has "
                         f"{logits.shape[-1]} labels. Serve a value/reward model (AutoModelForTokenClassification)")
    return logits.squeeze(-1).float()


class TokenScorer:
    """Per-token outputs for unpadded sequences, computed `max_batch` sequences per forward pass."""

    def __init__(self, model: torch.nn.Module, pad_id: int, max_batch: int = 8, device: torch.device | str = "cpu"):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.model = model.to(device).eval()
        self.pad_id = pad_id
        self.max_batch = max_batch
        self.device = device

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_input_embeddings().num_embeddings)

    def score(self, token_ids: list[list[int]]) -> list[list[float]]:
        """One list of floats per input sequence, as long as that sequence."""
        outputs: list[list[float]] = []
        for start in range(0, len(token_ids), self.max_batch):
            chunk = token_ids[start:start + self.max_batch]
            values = token_scalar_outputs(self.model, *pad_right(chunk, self.pad_id, self.device)).cpu()
            outputs.extend(values[i, :len(row)].tolist() for i, row in enumerate(chunk))
        return outputs
