"""From `SamplingParams` to what a sequence carries, and from a finished sequence to its `TokenOutput`."""

from __future__ import annotations

import functools

from hybridrl.rollout.base import SamplingParams, TokenOutput
from hybridrl.rollout.engine.sequence import SamplingSpec, Sequence


def sampling_spec(params: SamplingParams) -> SamplingSpec:
    """The per-row sampling settings; greedy rows carry temperature 1 (their log-probs' temperature)."""
    if params.greedy:
        return SamplingSpec(temperature=1.0, top_k=params.top_k, top_p=params.top_p, greedy=True)
    return SamplingSpec(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p, greedy=False)


def stop_token_set(eos_ids: frozenset[int], params: SamplingParams) -> frozenset[int]:
    """Tokens that end a sequence (kept in its output): EOS (the model's, the tokenizer's and
    params.eos_token_ids) unless ignore_eos, and params.stop_token_ids always."""
    eos_token_ids = () if params.ignore_eos else tuple(params.eos_token_ids)
    return _stop_set(frozenset() if params.ignore_eos else eos_ids, eos_token_ids, tuple(params.stop_token_ids))


@functools.lru_cache(maxsize=64)
def _stop_set(eos_ids: frozenset[int], eos_token_ids: tuple[int, ...], stop_token_ids: tuple[int, ...]
              ) -> frozenset[int]:
    """Built once per distinct setting: every turn of an agent loop asks for the same set (a tool parser's stop
    ids, possibly many), and building it per request cost the event loop time the engine waited for."""
    return eos_ids | frozenset(eos_token_ids) | frozenset(stop_token_ids)


def check_request(params: SamplingParams, prompt_len: int, max_model_len: int, request_id: str) -> None:
    """A request is one sequence with a budget, and its prompt leaves room for at least one token."""
    if params.n != 1:
        raise ValueError(f"request {request_id!r}: SamplingParams.n={params.n}, but a request is one sequence; "
                         "issue n requests (each with its own row_offset) for n samples")
    if params.max_new_tokens < 1:
        raise ValueError(f"request {request_id!r}: max_new_tokens ({params.max_new_tokens}) must be >= 1; a "
                         "trajectory whose budget is spent has nothing left to generate")
    if prompt_len == 0:
        raise ValueError(f"request {request_id!r}: the prompt is empty; every prompt needs at least one token")
    if prompt_len >= max_model_len:
        raise ValueError(f"request {request_id!r}: the prompt has {prompt_len} tokens, the engine's max_model_len is "
                         f"{max_model_len}: nothing can be generated. Raise actor_rollout_ref.rollout.max_model_len "
                         "(or data.max_prompt_length + data.max_response_length), or shorten the conversation")


def token_output(seq: Sequence) -> TokenOutput:
    """What a request returns: its generated ids and log-probs, why it ended, and its cache / preemption counts."""
    assert seq.stop_reason is not None, "token_output of a sequence still running"
    return TokenOutput(token_ids=seq.completion_token_ids, log_probs=seq.output_logprobs.tolist(),
                       stop_reason=seq.stop_reason, num_preempted=seq.num_preempted,
                       prefix_cache_hit_tokens=seq.prefix_cache_hit_tokens or 0)
