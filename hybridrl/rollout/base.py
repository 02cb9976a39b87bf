"""The seam between the trainer's rollout worker and a generation backend (`rollout.name`).

A backend takes token-id prompts and sampling parameters and returns, per generated sequence, the
token ids and the per-token log-probs under the distribution they were sampled from (temperature
applied). Backends: `hf` (transformers `generate`, the reference) and `hybrid` (our paged-KV engine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    row_offset: int = 0

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


class RolloutBackend(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutOutput:
        """Generate `params.n` continuations for every prompt (token ids, no padding)."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new weights, given with HF parameter names (`model.layers.0.self_attn.q_proj.weight`, ...)."""
        ...

    def sleep(self) -> None:
        """Free generation-only memory (KV cache, graph pools) until `wake_up`."""
        ...

    def wake_up(self) -> None:
        ...
