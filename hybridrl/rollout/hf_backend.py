"""`rollout.name=hf`: transformers `generate` as a rollout backend (the reference implementation).

It generates with the trainer's own module (shared storage, so weight sync is free) and reports
per-token log-probs computed from the raw logits divided by the temperature. Its request API
(`request_engine()`, hf_requests.py) runs requests one at a time: the reference, not the fast path.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

from hybridrl.rollout.base import RolloutOutput, SamplingParams, TokenOutput


class HFRolloutBackend:
    def __init__(self, model: torch.nn.Module, pad_token_id: int, eos_token_ids: Iterable[int] = ()):
        self.model = model
        self.pad_token_id = pad_token_id
        self.eos_token_ids = tuple(eos_token_ids)
        self._request_engine = None

    def stop_ids(self, params: SamplingParams) -> set[int]:
        """Tokens that end a sequence (kept): EOS unless ignore_eos, and params.stop_token_ids always."""
        eos = set() if params.ignore_eos else set(self.eos_token_ids) | set(params.eos_token_ids)
        return eos | set(params.stop_token_ids)

    def _generation_config(self, params: SamplingParams) -> GenerationConfig:
        eos = sorted(self.stop_ids(params))
        sample = not params.greedy
        return GenerationConfig(
            do_sample=sample, temperature=params.temperature if sample else None,
            top_k=params.top_k if sample and params.top_k > 0 else None,
            top_p=params.top_p if sample and params.top_p < 1.0 else None,
            max_new_tokens=params.max_new_tokens, num_return_sequences=params.n,
            eos_token_id=eos or None,
            pad_token_id=self.pad_token_id, return_dict_in_generate=True, output_logits=True,
            use_cache=True)

    def _left_pad(self, prompts: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt):] = torch.tensor(prompt)
            mask[row, width - len(prompt):] = 1
        return ids.to(device), mask.to(device)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> RolloutOutput:
        tokens, log_probs = self._generate(prompts, params)
        return self._trim(tokens, log_probs, params)

    @torch.no_grad()
    def _generate(self, prompts: list[list[int]], params: SamplingParams,
                  stopping: StoppingCriteriaList | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """HF generate -> (new tokens, their log-probs), (B*n, T) on the CPU, rows padded past their end."""
        was_training = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device
        ids, mask = self._left_pad(prompts, device)
        if params.seed is not None:  # a replica's shard or a request (row_offset > 0) draws from its own stream
            torch.manual_seed(row_seed(params.seed, params.row_offset))
        try:
            out = self.model.generate(input_ids=ids, attention_mask=mask, stopping_criteria=stopping,
                                      generation_config=self._generation_config(params))
        finally:
            self.model.train(was_training)
        new_tokens = out.sequences[:, ids.shape[1]:]
        temperature = params.temperature if not params.greedy else 1.0
        logits = torch.stack(out.logits, dim=1).float() / temperature  # (B*n, T, V)
        log_probs = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        return new_tokens.cpu(), log_probs.cpu()

    def generate_request(self, prompt_ids: list[int], params: SamplingParams,
                         should_abort: Callable[[], bool] = lambda: False) -> TokenOutput:
        """One request, run to its end or until `should_abort()` turns true (checked after every token: the
        tokens so far come back with stop_reason `abort`)."""
        if params.n != 1:
            raise ValueError(f"SamplingParams.n={params.n}, but a request is one sequence; issue n requests")
        tokens, log_probs = self._generate([list(prompt_ids)], params, StoppingCriteriaList([_Abort(should_abort)]))
        out = self._trim(tokens, log_probs, params)
        token_ids, row_log_probs = out.token_ids[0], out.log_probs[0]
        if token_ids and token_ids[-1] in self.stop_ids(params):
            reason = "stop"
        elif len(token_ids) >= params.max_new_tokens:
            reason = "length"
        else:
            reason = "abort"
        return TokenOutput(token_ids, row_log_probs, reason)

    def request_engine(self):
        """The asyncio front end (rollout.base.RequestEngine): requests run one at a time, in arrival order."""
        if self._request_engine is None:
            self._request_engine = HFRequestEngine(self)
        return self._request_engine

    def _trim(self, tokens: torch.Tensor, log_probs: torch.Tensor, params: SamplingParams) -> RolloutOutput:
        """Cut each row after its first stop token (kept), dropping HF's padding."""
        eos = self.stop_ids(params)
        token_rows, logprob_rows = [], []
        for row_tokens, row_lp in zip(tokens.tolist(), log_probs.tolist()):
            end = next((i + 1 for i, t in enumerate(row_tokens) if t in eos), len(row_tokens))
            token_rows.append(row_tokens[:end])
            logprob_rows.append(row_lp[:end])
        return RolloutOutput(token_ids=token_rows, log_probs=logprob_rows)

    def update_weights(self, named_tensors) -> None:
        """Nothing to copy: this backend generates with the trainer's module itself."""

    def sleep(self) -> None:
        """No generation-only memory to free (HF's KV cache lives only inside `generate`)."""

    def wake_up(self) -> None:
        """See `sleep`."""


class _Abort(StoppingCriteria):
    """Stops generation once `should_abort()` is true (an aborted request)."""

    def __init__(self, should_abort: Callable[[], bool]) -> None:
        self.should_abort = should_abort

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:  # type: ignore[override]
        return torch.full((input_ids.shape[0],), self.should_abort(), dtype=torch.bool, device=input_ids.device)


@dataclass
class _Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    result: asyncio.Future
    aborted: threading.Event = field(default_factory=threading.Event)
    started: bool = False


def row_seed(seed: int, row_offset: int) -> int:
    """The torch seed of the stream that starts at row `row_offset`. The CPU generator (mt19937) keeps only a
    seed's low 32 bits, so the seed's high bits (a dynamic-sampling round) are folded into them and the offset is
    spread over them (an odd multiplier is a bijection mod 2**32: distinct offsets below 2**32 give distinct
    streams); a seed below 2**32 at row 0 is itself."""
    return ((seed ^ (seed >> 32)) + row_offset * 0x9E3779B1) % 2**63


class HFRequestEngine:
    """rollout.base.RequestEngine over `HFRolloutBackend.generate_request`: one worker task runs the requests
    one at a time, in arrival order, on a worker thread (the event loop stays free meanwhile). An abort
    of a waiting request returns no tokens; of the running one, what it generated up to the next token."""

    def __init__(self, backend: HFRolloutBackend) -> None:
        self.backend = backend
        self._queue: deque[_Request] = deque()
        self._requests: dict[str, _Request] = {}
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> TokenOutput:
        if request_id in self._requests:
            raise ValueError(f"request {request_id!r} is already in flight; request ids must be unique")
        request = _Request(request_id, list(prompt_ids), params, asyncio.get_running_loop().create_future())
        self._requests[request_id] = request
        self._queue.append(request)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._work(), name="hybridrl-hf-requests")
        try:
            return await asyncio.shield(request.result)
        except asyncio.CancelledError:
            request.aborted.set()  # the worker drops it, or cuts it short at its next token
            raise

    async def abort(self, request_id: str) -> TokenOutput | None:
        request = self._requests.get(request_id)
        if request is None:
            return None
        request.aborted.set()
        if not request.started:
            self._queue.remove(request)
            self._finish(request, TokenOutput([], [], "abort"))
        output = await asyncio.shield(request.result)
        return output if output.stop_reason == "abort" else None

    async def abort_all(self) -> dict[str, TokenOutput]:
        ids = list(self._requests)
        outputs = await asyncio.gather(*(self.abort(request_id) for request_id in ids))
        return {request_id: out for request_id, out in zip(ids, outputs) if out is not None}

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    async def _work(self) -> None:
        if self._executor is None:
            device = next(self.backend.model.parameters()).device
            bind = (lambda: torch.cuda.set_device(device)) if device.type == "cuda" else None  # per-thread device
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="hybridrl-hf-requests", initializer=bind)
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                request = self._queue.popleft()
                if request.aborted.is_set():  # its caller was cancelled before it started
                    self._finish(request, TokenOutput([], [], "abort"))
                    continue
                request.started = True
                try:
                    output = await loop.run_in_executor(self._executor, self.backend.generate_request,
                                                        request.prompt_ids, request.params, request.aborted.is_set)
                except Exception as exc:  # this request's failure is its caller's
                    self._requests.pop(request.request_id, None)
                    request.result.set_exception(exc)
                else:
                    self._finish(request, output)
        finally:
            self._task = None

    def _finish(self, request: _Request, output: TokenOutput) -> None:
        self._requests.pop(request.request_id, None)
        if not request.result.done():
            request.result.set_result(output)
