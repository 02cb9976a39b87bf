"""What a decode burst does on the device between model forwards: sample, then advance the inputs.

A burst runs several decode steps with no host round trip: the sampled tokens become the next
inputs on the device, positions and context lengths advance, and KV slots are looked up in the
block table. The host reserved blocks for each row's first `limit - start` positions (its remaining
token budget, capped at the burst length); past its limit a row keeps running with no KV writes
(slot -1) and a frozen context length, and the host drops those tokens.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch

from hybridrl.rollout.engine.sampler import gumbel_argmax, sample
from hybridrl.rollout.engine.sequence import SamplingSpec

# sampler(logits (B, V), keys (B,), steps (B,)) -> (tokens int64 (B,), log-probs float32 (B,))
Sampler = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class LaunchedStep:
    """A prefill step or a decode burst launched on the device: its rows (`seqs`, in batch order), its length
    (1 for a prefill), the last step's tokens still on the device (what a burst queued behind it reads as
    those rows' inputs), and its outputs on their way to the host."""

    seqs: list[Any]
    num_steps: int
    last_tokens: torch.Tensor  # (B,) the last step's tokens: the next burst's first inputs
    host_tokens: torch.Tensor  # (B, num_steps), filled once `done` fires
    host_logprobs: torch.Tensor
    done: Any = None  # a CUDA event after the device-to-host copies; None on CPU (already there)
    started: Any = None  # a CUDA event recorded before the step's first kernel; None on CPU
    cpu_seconds: float = 0.0  # on CPU, where the launch computes everything: the launch's own time

    def results(self) -> tuple[list[list[int]], list[list[float]]]:
        """(B, num_steps) tokens and log-probs as lists; waits for this step only, not for a later one
        already queued behind it."""
        if self.done is not None:
            self.done.synchronize()
        return self.host_tokens.tolist(), self.host_logprobs.tolist()

    def device_seconds(self) -> float:
        """The device time from this step's first kernel to its last copy (call after `results`)."""
        if self.started is None:
            return self.cpu_seconds
        return self.started.elapsed_time(self.done) / 1e3


def step_started(device: torch.device) -> Any:
    """A timing event recorded now on the current stream (None on CPU): where a launched step begins."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def copy_to_host(*tensors: torch.Tensor) -> tuple[list[torch.Tensor], Any]:
    """Start device-to-host copies into pinned memory and return them with a timing event that fires when
    they land; CPU tensors come back as they are, with no event."""
    if tensors[0].device.type != "cuda":
        return list(tensors), None
    host = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]
    for dst, src in zip(host, tensors):
        dst.copy_(src, non_blocking=True)
    done = torch.cuda.Event(enable_timing=True)
    done.record()
    return host, done


def advance_decode_inputs(input_ids: torch.Tensor, positions: torch.Tensor, block_tables: torch.Tensor,
                          context_lens: torch.Tensor, slot_mapping: torch.Tensor, tokens: torch.Tensor,
                          limits: torch.Tensor, block_size: int) -> None:
    """In place, on the device: the next step's inputs after sampling `tokens` (B,).

    limits (B,) int64: positions < limit have a reserved KV slot; the others write nothing."""
    input_ids.copy_(tokens)
    nxt = positions + 1
    valid = nxt < limits
    column = (nxt // block_size).clamp_(max=block_tables.shape[1] - 1)
    slots = block_tables.gather(1, column[:, None])[:, 0].long() * block_size + nxt % block_size
    slot_mapping.copy_(torch.where(valid, slots, -1))
    context_lens.copy_(torch.where(valid, nxt + 1, context_lens.long()))
    positions.copy_(torch.where(valid, nxt, positions))


def record_and_advance(tokens: torch.Tensor, logprobs: torch.Tensor, out_tokens: torch.Tensor,
                       out_logprobs: torch.Tensor, column: int, input_ids: torch.Tensor, positions: torch.Tensor,
                       block_tables: torch.Tensor, context_lens: torch.Tensor, slot_mapping: torch.Tensor,
                       limits: torch.Tensor, steps: torch.Tensor, block_size: int, advance: bool) -> None:
    """After step `column` of a burst: its tokens and log-probs into that column of the outputs (B, steps), and
    unless it was the burst's last step the next step's inputs (`advance_decode_inputs`) and sampling steps.
    On CUDA one Triton kernel (`advance_kernel.py`) instead of some 20 launches; this torch code is its reference."""
    kernel = _record_and_advance_kernel() if tokens.is_cuda else None
    if kernel is not None:
        kernel(tokens, logprobs, out_tokens, out_logprobs, column, input_ids, positions, block_tables, context_lens,
               slot_mapping, limits, steps, block_size, advance)
        return
    out_tokens[:, column], out_logprobs[:, column] = tokens, logprobs
    if advance:
        advance_decode_inputs(input_ids, positions, block_tables, context_lens, slot_mapping, tokens, limits,
                              block_size)
        steps += 1


@functools.cache
def _record_and_advance_kernel():
    """`advance_kernel.record_and_advance`, or None without Triton (the torch path then)."""
    try:
        from hybridrl.rollout.engine.advance_kernel import record_and_advance as kernel
    except ImportError:
        return None
    return kernel


def _fused_sampler_fn():
    """`sampling_kernel.fused_sample`, or None without Triton (the torch path then)."""
    try:
        from hybridrl.rollout.engine.sampling_kernel import fused_sample
    except ImportError:
        return None
    return fused_sample


def make_sampler(spec: SamplingSpec, device: torch.device, argmax_fn: Callable = gumbel_argmax) -> Sampler:
    """One setting for every row: the fused Triton sampler on CUDA when it applies (no top-k / top-p),
    else `sampler.sample`. `spec`: a `SamplingSpec` (or anything with its four fields)."""
    fused = _fused_sampler_fn() if device.type == "cuda" and not spec.truncates else None
    if fused is not None:
        temperature = torch.tensor([spec.temperature], dtype=torch.float32, device=device)
        greedy = torch.tensor([int(spec.greedy)], dtype=torch.int32, device=device)
        return lambda logits, keys, steps: fused(logits, keys, steps, temperature, greedy)
    return lambda logits, keys, steps: sample(logits, spec.temperature, spec.top_k, spec.top_p,
                                              spec.greedy, keys, steps, argmax_fn)


def batch_setting(specs: list[SamplingSpec]) -> tuple[SamplingSpec, ...]:
    """A batch's sampling setting: (spec,) when every row agrees (a batch call shares one spec object; separate
    requests carry equal ones), else one spec per row."""
    first = specs[0]
    return (first,) if all(spec is first or spec == first for spec in specs) else tuple(specs)


def sampler_for(specs: list[SamplingSpec], device: torch.device, argmax_fn: Callable = gumbel_argmax) -> Sampler:
    """The sampler of a batch whose row i samples by specs[i]: `make_sampler` when all rows agree (a batch
    call: one shared spec object), else per-row temperature and greedy flags, with rows grouped by their
    top-k / top-p truncation (greedy rows ignore it and join the untruncated group)."""
    setting = batch_setting(specs)
    if len(setting) == 1:
        return make_sampler(setting[0], device, argmax_fn)
    groups: dict[tuple[int, float], list[int]] = {}
    for i, spec in enumerate(specs):
        truncation = (spec.top_k, spec.top_p) if spec.truncates and not spec.greedy else (-1, 1.0)
        groups.setdefault(truncation, []).append(i)
    temperature = torch.tensor([s.temperature for s in specs], dtype=torch.float32, device=device)
    greedy = torch.tensor([s.greedy for s in specs], dtype=torch.bool, device=device)
    if len(groups) == 1:
        return _per_row_sampler(temperature, greedy, *next(iter(groups)), device, argmax_fn)
    parts = []
    for (top_k, top_p), rows in groups.items():
        index = torch.tensor(rows, dtype=torch.int64, device=device)
        parts.append((index, _per_row_sampler(temperature[index], greedy[index], top_k, top_p, device, argmax_fn)))

    def grouped(logits: torch.Tensor, keys: torch.Tensor, steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.empty(logits.shape[0], dtype=torch.int64, device=logits.device)
        logprobs = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        for index, group_sampler in parts:
            tokens[index], logprobs[index] = group_sampler(logits.index_select(0, index), keys[index], steps[index])
        return tokens, logprobs
    return grouped


def _per_row_sampler(temperature: torch.Tensor, greedy: torch.Tensor, top_k: int, top_p: float,
                     device: torch.device, argmax_fn: Callable) -> Sampler:
    """Rows of one truncation with their own temperature (float32 (B,)) and greedy flag (bool (B,))."""
    untruncated = not (0 < top_k or top_p < 1.0)
    fused = _fused_sampler_fn() if device.type == "cuda" and untruncated else None
    if fused is not None:
        greedy_i32 = greedy.to(torch.int32)
        return lambda logits, keys, steps: fused(logits, keys, steps, temperature, greedy_i32)
    return lambda logits, keys, steps: sample(logits, temperature, top_k, top_p, greedy, keys, steps, argmax_fn)
