"""Between padded verl batches and the unpadded rows a pooling server scores: valid-token rows out,
sequence scores (output at the last token) and critic values (verl's `-R-1` shift) back in.
"""

from __future__ import annotations

import torch


def valid_token_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[list[list[int]], list[int]]:
    """(token ids where attention_mask is 1, per row; the column each row starts at), from (B, T) tensors.

    Rows must be one contiguous run of valid tokens (left-padded prompt + right-padded response).
    """
    rows: list[list[int]] = []
    starts: list[int] = []
    for index, (ids, mask) in enumerate(zip(input_ids.tolist(), attention_mask.tolist())):
        columns = [c for c, m in enumerate(mask) if m]
        if not columns:
            raise ValueError(f"row {index} of the batch has no valid token (attention_mask is all 0)")
        if columns[-1] - columns[0] + 1 != len(columns):
            raise ValueError(f"row {index}'s attention_mask has holes; remote scoring needs one contiguous run "
                             f"of valid tokens per row (left-padded prompt + right-padded response)")
        rows.append([ids[c] for c in columns])
        starts.append(columns[0])
    return rows, starts


def last_token_scores(token_outputs: list[list[float]]) -> torch.Tensor:
    """(B,) float32: each sequence's output at its last token (a reward model's sequence score)."""
    return torch.tensor([row[-1] for row in token_outputs], dtype=torch.float32)


def shifted_response_values(token_outputs: list[list[float]], starts: list[int], prompt_len: int,
                            response_mask: torch.Tensor) -> torch.Tensor:
    """(B, R) values: response token t gets the output at padded column P-1+t (verl's critic), masked.

    `token_outputs[i]` covers row i's valid tokens, which begin at padded column `starts[i]`.
    """
    num_rows, response_len = response_mask.shape
    values = torch.zeros(num_rows, response_len, dtype=torch.float32)
    for i, (outputs, start) in enumerate(zip(token_outputs, starts)):
        first = prompt_len - 1 - start  # index in the valid tokens of padded column P-1
        if first < 0:
            raise ValueError(f"row {i} has no prompt token; the value of the first response token comes from "
                             f"the last prompt token (verl's shift), so every row needs a non-empty prompt")
        taken = outputs[first:first + response_len]
        values[i, :len(taken)] = torch.tensor(taken, dtype=torch.float32)
    return values * response_mask.to(values.dtype)
