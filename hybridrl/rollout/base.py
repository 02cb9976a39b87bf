"""The seam between the trainer's rollout worker and a generation backend (`rollout.name`).

A backend takes token-id prompts and sampling parameters and returns, per generated sequence, the
token ids and the per-token log-probs under the distribution they were sampled from (temperature
applied). Backends: `hf` (transformers `generate`, the reference) and `hybrid` (our paged-KV engine).
Two ways to call one: the batch call (`RolloutBackend.generate`, synchronous RL) and the request API
(`RolloutBackend.request_engine()`, a `RequestEngine`: one sequence per request, each with its own
sampling parameters, for agent loops and asynchronous training).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Iterable, Protocol

import torch


@dataclass
class SamplingParams:
    """verl rollout keys, in backend terms. `top_k` <= 0 and `top_p` >= 1 mean "off"."""

    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    do_sample: bool = True
    n: int = 1
    max_new_tokens: int = 512
    ignore_eos: bool = False
    eos_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    # Index of this call's first output row in the whole step's batch: a data-parallel replica generating
    # one shard keys its per-row sampling noise by global rows, so the shard samples as it would in one call.
    # For a request (one sequence): its row. With `seed`, the pair keys the request's sampling noise in the
    # hybrid engine, together with each token's absolute position: a request with (seed, row r) samples
    # what row r of a batch call with that seed samples, and a resumed request continues exactly
    # (`resume_request`). Give each trajectory its own row; a follow-up turn may keep its trajectory's.
    row_offset: int = 0
    # Request-level generation (agent loops, async training): tokens that end a request besides EOS, e.g. a
    # tool parser's `</tool_call>`; like EOS, the stop token is kept in the output.
    stop_token_ids: tuple[int, ...] = ()

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature <= 0


@dataclass
class RolloutOutput:
    """Outputs for `len(prompts) * n` sequences, prompt-major: prompt i's samples are rows i*n .. i*n+n-1.

    `token_ids[j]` excludes the prompt and includes the EOS token when one stopped the sequence.
    `log_probs[j][t]` is log p(token_ids[j][t]) under the sampling distribution (logits / temperature;
    for greedy decoding, the temperature-1 distribution).
    """

    token_ids: list[list[int]]
    log_probs: list[list[float]]
    metrics: dict[str, float] = field(default_factory=dict)


STOP_REASONS = ("stop", "length", "abort")


@dataclass
class TokenOutput:
    """One request's result (token-in / token-out): the sampled ids (the stop token included when one ended it),
    their log-probs under the sampling distribution, and why it ended: `stop` (EOS or a stop token), `length`
    (its max_new_tokens or the model's length) or `abort` (aborted; what was generated so far).
    `prefix_cache_hit_tokens`: prompt tokens whose KV came from the prefix cache instead of a prefill."""

    token_ids: list[int]
    log_probs: list[float]
    stop_reason: str
    num_preempted: int = 0
    prefix_cache_hit_tokens: int = 0


class RequestEngine(Protocol):
    """The asyncio front end of a backend's request API: many requests in flight, each with its own sampling
    parameters (`n` must be 1: a request is one sequence), batched continuously by one engine loop."""

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> TokenOutput:
        """Generate one continuation of `prompt_ids`; returns when it stops, hits its length or is aborted."""
        ...

    async def abort(self, request_id: str) -> TokenOutput | None:
        """Stop a running request; its `generate` returns what it generated so far (stop_reason `abort`).
        None when no such request is running."""
        ...


def resume_request(prompt_ids: list[int], params: SamplingParams, partial: TokenOutput
                   ) -> tuple[list[int], SamplingParams]:
    """The request that continues an aborted one (asynchronous training: abort, update weights, resume):
    the original prompt + the tokens it kept, with the budget it has left. Its KV is rebuilt by prefill.
    With the same weights it continues as if never interrupted: exactly for greedy decoding, and for
    seeded sampling in the hybrid engine (noise keyed by seed, row and absolute position). The caller
    concatenates `partial` with the resumed request's output (tokens and log-probs)."""
    if partial.stop_reason != "abort":
        raise ValueError(f"resume_request: the request ended with stop_reason {partial.stop_reason!r}; only an "
                         "aborted one (`abort`) has anything left to generate")
    return continuation(prompt_ids, params, partial.token_ids)


def continuation(prompt_ids: Sequence[int], params: SamplingParams, kept_token_ids: Sequence[int]
                 ) -> tuple[list[int], SamplingParams]:
    """`resume_request` from the tokens an aborted request kept (any sequence of ints: a caller that keeps them in
    an array needs no `TokenOutput` and no list of their log-probs)."""
    remaining = params.max_new_tokens - len(kept_token_ids)
    if remaining < 1:
        raise ValueError(f"resume_request: the aborted request already generated {len(kept_token_ids)} of its "
                         f"max_new_tokens={params.max_new_tokens}; nothing is left to resume")
    return [*prompt_ids, *kept_token_ids], replace(params, max_new_tokens=remaining)


class RolloutBackend(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutOutput:
        """Generate `params.n` continuations for every prompt (token ids, no padding)."""
        ...

    def request_engine(self) -> RequestEngine:
        """The backend's request API (one front end per backend, created on first use)."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new weights, given with HF parameter names (`model.layers.0.self_attn.q_proj.weight`, ...)."""
        ...

    def sleep(self) -> None:
        """Free generation-only memory (KV cache, graph pools) until `wake_up`."""
        ...

    def wake_up(self) -> None:
        ...
