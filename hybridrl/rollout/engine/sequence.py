"""One generated sequence: its tokens, KV block table and sampling state (control plane, no torch)."""

from __future__ import annotations

from enum import Enum, auto


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


class Sequence:
    """Prompt + generated tokens of one output row, and where its KV lives.

    `row` is the sequence's index in the prompt-major output; with `seed` it keys the sampling noise,
    so a row's tokens do not depend on which other sequences share its batches.
    """

    def __init__(self, row: int, prompt_ids: list[int], max_new_tokens: int, seed: int,
                 stop_ids: frozenset[int] = frozenset(), prompt_block_hashes: list[bytes] | None = None) -> None:
        if not prompt_ids:
            raise ValueError(f"prompt {row} is empty; every prompt needs at least one token")
        self.row = row
        self.token_ids = list(prompt_ids)
        self.num_prompt_tokens = len(prompt_ids)
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.stop_ids = stop_ids
        self.status = SequenceStatus.WAITING
        self.block_table: list[int] = []
        self.num_cached_tokens = 0  # leading tokens whose KV is already in the cache (prefix hits)
        self.output_logprobs: list[float] = []
        # Prefix-cache hashes of the prompt's full blocks, filled by the block manager; pass one list to
        # every sample of a prompt so each block is hashed once per prompt, not once per sample.
        self.prompt_block_hashes = prompt_block_hashes if prompt_block_hashes is not None else []

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_completion_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_remaining_tokens(self) -> int:
        """Tokens it may still generate (stop ids aside)."""
        return self.max_new_tokens - self.num_completion_tokens

    @property
    def last_token(self) -> int:
        return self.token_ids[-1]

    def num_blocks(self, block_size: int) -> int:
        return (len(self.token_ids) + block_size - 1) // block_size

    def block_tokens(self, i: int, block_size: int) -> list[int]:
        return self.token_ids[i * block_size:(i + 1) * block_size]

    def append_token(self, token_id: int, logprob: float) -> bool:
        """Record one sampled token; return True when the sequence is finished."""
        self.token_ids.append(token_id)
        self.output_logprobs.append(logprob)
        return token_id in self.stop_ids or self.num_completion_tokens >= self.max_new_tokens

    def append_tokens(self, token_ids: list[int], logprobs: list[float]) -> bool:
        """Record a burst's tokens up to the first stop (the rest are dropped); True when finished.

        One list extend when no stop id occurs and the length budget holds (the common case: a burst
        is a fraction of the response), else token by token."""
        room = self.num_remaining_tokens
        if len(token_ids) < room and self.stop_ids.isdisjoint(token_ids):
            self.token_ids.extend(token_ids)
            self.output_logprobs.extend(logprobs)
            return False
        return any(self.append_token(t, lp) for t, lp in zip(token_ids, logprobs))
