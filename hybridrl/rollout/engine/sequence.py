"""One generated sequence: its tokens, KV block table and sampling state (control plane, no torch)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from enum import Enum, auto


class SequenceStatus(Enum):
    WAITING = auto()
    RUNNING = auto()
    FINISHED = auto()


@dataclass(frozen=True)
class SamplingSpec:
    """How one sequence samples: what the data plane needs per row (`SamplingParams` minus the budget).
    `top_k` <= 0 and `top_p` >= 1 mean "off"; `greedy` rows take the arg-max and report log-probs at
    temperature 1. Sequences of one batch call share one spec object (the sampler's all-same fast path)."""

    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    greedy: bool = False

    @property
    def truncates(self) -> bool:
        """Whether top-k or top-p cut the distribution (the fused sampler handles only the untruncated one)."""
        return 0 < self.top_k or self.top_p < 1.0


GREEDY = SamplingSpec(greedy=True)


class Sequence:
    """Prompt + generated tokens of one output row, and where its KV lives.

    `seed` is the row's 32-bit noise key (`sampler.row_key(seed, row)`): with the absolute position of the
    token being sampled it keys the sampling noise, so a row's tokens depend neither on which other
    sequences share its batches nor on where its prompt ends (a resumed request, whose prompt holds the
    tokens generated before, samples what the uninterrupted one would). `slot` is the row of the runner's
    host block table it uses while it is alive (unique among live sequences; `row` by default).
    `request_id` is set for requests of the request API (None for the rows of a batch call);
    `cache_on_finish` registers its full blocks in the prefix cache when it finishes, is aborted or is
    preempted, so a follow-up turn whose prompt extends it finds its KV.
    """

    def __init__(self, row: int, prompt_ids: list[int] | array, max_new_tokens: int, seed: int,
                 stop_ids: frozenset[int] = frozenset(), prompt_block_hashes: list[bytes] | None = None, *,
                 sampling: SamplingSpec = GREEDY, request_id: str | None = None, slot: int | None = None,
                 cache_on_finish: bool = False) -> None:
        if not prompt_ids:
            raise ValueError(f"prompt {row} is empty; every prompt needs at least one token")
        self.row = row
        self.slot = row if slot is None else slot
        self.request_id = request_id
        # Arrays, not lists: the garbage collector walks every item of every list it tracks, and the sequences in
        # flight (thousands in asynchronous training, hundreds of tokens each) live across many collections.
        self.token_ids = array("q", prompt_ids)
        self.num_prompt_tokens = len(prompt_ids)
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.stop_ids = stop_ids
        self.sampling = sampling
        self.cache_on_finish = cache_on_finish
        self.status = SequenceStatus.WAITING
        self.stop_reason: str | None = None  # `stop`, `length` or `abort` once FINISHED
        self.block_table: list[int] = []
        self.num_cached_tokens = 0  # leading tokens whose KV is already in the cache (prefix hits)
        self.prefix_cache_hit_tokens: int | None = None  # num_cached_tokens at its first admission
        self.num_preempted = 0
        self.output_logprobs = array("d")
        # Prefix-cache hashes of the prompt's full blocks, filled by the block manager; pass one list to
        # every sample of a prompt so each block is hashed once per prompt, not once per sample.
        self.prompt_block_hashes = prompt_block_hashes if prompt_block_hashes is not None else []
        # The chain of its written full blocks, recorded when it leaves with cache_on_finish (the block manager)
        self.written_block_hashes: list[bytes] = []

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
        return self.token_ids[self.num_prompt_tokens:].tolist()

    @property
    def num_remaining_tokens(self) -> int:
        """Tokens it may still generate (stop ids aside)."""
        return self.max_new_tokens - self.num_completion_tokens

    @property
    def last_token(self) -> int:
        return self.token_ids[-1]

    def num_blocks(self, block_size: int) -> int:
        return (len(self.token_ids) + block_size - 1) // block_size

    def block_tokens(self, i: int, block_size: int) -> array:
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

    def finish(self, reason: str | None = None) -> None:
        """Mark it FINISHED: `reason` given (`abort`), or why its last token ended it (`stop` or `length`)."""
        self.status = SequenceStatus.FINISHED
        if reason is None:
            stopped = self.num_completion_tokens > 0 and self.last_token in self.stop_ids
            reason = "stop" if stopped else "length"
        self.stop_reason = reason
