"""Request-level generation on a rollout rank, for the asynchronous trainer modes
(trainer/batch_sources/async_*.py).

The controller submits prompt groups (a prompt and its n samples); each sample is one request of the engine's
request API (`LLMEngine.make_request` / `submit_request` / `abort_request` / `step`), keyed like row
`row_offset + j` of a batch call with the group's seed, so its tokens are those the synchronous trainer would
sample. `advance` steps the engine and hands back the groups whose every sample has finished; `forget` drops
groups (aborting their requests). `park` aborts the requests in flight and keeps what each generated (tokens and
log-probs): the engine can then sleep and take new weights. The next `advance` resumes each parked sample as a
new request of its prompt + kept tokens with the budget left (`rollout.base.continuation`, `resume_request`'s
body; prefill rebuilds its KV). With unchanged weights a resumed sample continues exactly as if never
interrupted (the sampling noise is keyed by seed, row and absolute position).

Each sample records the policy versions that produced its tokens: a generation segment started at version v
(a submit or a resume) counts only if it generated a token.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field, replace
from typing import Protocol

from hybridrl.rollout.base import SamplingParams, TokenOutput, continuation


class RequestCore(Protocol):
    """The synchronous request API of `LLMEngine` (the `hybrid` backend)."""

    def make_request(self, request_id: str, prompt_ids: list[int], params: SamplingParams): ...

    def submit_request(self, seq) -> None: ...

    def abort_request(self, request_id: str) -> TokenOutput | None: ...

    def step(self) -> list[tuple[str, TokenOutput]]: ...

    def has_unfinished_requests(self) -> bool: ...

    def take_metrics(self) -> dict[str, float]: ...


@dataclass(frozen=True)
class GroupRequest:
    """A prompt group as the controller submits it: sample j is row `row_offset + j` under `seed`, on the
    rollout replica `replica`."""

    group_id: str
    prompt_ids: list[int]
    n: int
    seed: int
    row_offset: int
    replica: int = 0


@dataclass(frozen=True)
class FinishedGroup:
    """A group whose n samples have all finished: per sample its tokens (EOS or stop token kept), their
    log-probs under the sampling distribution, the oldest and newest policy versions that produced them, and
    how often it was resumed after an abort."""

    group_id: str
    token_ids: list[list[int]]
    log_probs: list[list[float]]
    min_versions: list[int]
    max_versions: list[int]
    num_resumes: list[int]


@dataclass
class _Sample:
    group_id: str
    index: int
    prompt_ids: list[int]
    params: SamplingParams
    # arrays: parked samples live across steps, and the garbage collector walks every item of a list (sequence.py)
    token_ids: array = field(default_factory=lambda: array("q"))
    log_probs: array = field(default_factory=lambda: array("d"))
    min_version: int | None = None
    max_version: int | None = None
    segments: int = 0  # generation segments started (1 + resumes)
    segment_version: int = 0
    done: bool = False

    @property
    def request_id(self) -> str:
        return f"{self.group_id}/{self.index}/{self.segments}"

    def take(self, output: TokenOutput) -> None:
        """A segment's output joins what the sample kept; its version counts when it produced a token."""
        self.token_ids.extend(output.token_ids)
        self.log_probs.extend(output.log_probs)
        if output.token_ids:
            self.min_version = self.segment_version if self.min_version is None else self.min_version
            self.max_version = self.segment_version
        self.done = output.stop_reason != "abort"


class RequestPool:
    """The groups of one rollout replica: in flight in the engine, parked (aborted, tokens kept), or finished
    and not yet handed back. `params`: the sampling settings every request shares (n=1; seed and row per
    sample)."""

    def __init__(self, engine: RequestCore) -> None:
        self.engine = engine
        self.groups: dict[str, list[_Sample]] = {}  # group id -> its samples, until handed back
        self.running: dict[str, _Sample] = {}  # request id -> sample, in the engine now
        self.parked: list[_Sample] = []  # aborted, waiting to resume

    @property
    def num_in_flight(self) -> int:
        return len(self.running) + len(self.parked)

    def submit(self, groups: list[GroupRequest], params: SamplingParams, version: int) -> None:
        """Start every sample of `groups` at policy version `version`."""
        for group in groups:
            if group.group_id in self.groups:
                raise ValueError(f"group {group.group_id!r} is already in this rollout replica's pool")
            samples = [_Sample(group.group_id, j, list(group.prompt_ids),
                               replace(params, n=1, seed=group.seed, row_offset=group.row_offset + j))
                       for j in range(group.n)]
            self.groups[group.group_id] = samples
            for sample in samples:
                self._start(sample, list(sample.prompt_ids), sample.params, version)

    def advance(self, max_steps: int, version: int) -> list[FinishedGroup]:
        """Resume the parked samples at `version`, then step the engine up to `max_steps` times (fewer when
        nothing is left in flight); the groups that finished, in the order they finished."""
        self._resume(version)
        finished: list[FinishedGroup] = []
        for _ in range(max_steps):
            if not self.running:
                break
            for request_id, output in self.engine.step():
                sample = self.running.pop(request_id)
                sample.take(output)
                if sample.done and all(s.done for s in self.groups[sample.group_id]):
                    finished.append(self._hand_back(sample.group_id))
        return finished

    def park(self) -> int:
        """Abort every request in flight, keeping what it generated; returns how many samples are parked."""
        for request_id, sample in self.running.items():
            output = self.engine.abort_request(request_id)
            assert output is not None, f"request {request_id} left the engine unseen"  # finishing ones left in step
            sample.take(output)
            self.parked.append(sample)
        self.running = {}
        return len(self.parked)

    def forget(self, group_ids: list[str] | None = None) -> None:
        """Drop these groups, or every group (None), aborting their requests in flight and their parked samples;
        ids this pool does not hold (handed back already, or on another replica) are skipped. A resumed run
        forgets everything (it re-issues its unfinished prompts itself); `drop` forgets the groups it evicted
        while they still ran."""
        dropped = set(self.groups) if group_ids is None else set(group_ids) & set(self.groups)
        for request_id, sample in list(self.running.items()):
            if sample.group_id in dropped:
                self.engine.abort_request(request_id)
                del self.running[request_id]
        self.parked = [sample for sample in self.parked if sample.group_id not in dropped]
        for group_id in dropped:
            del self.groups[group_id]

    def _start(self, sample: _Sample, prompt_ids: list[int], params: SamplingParams, version: int) -> None:
        sample.segments += 1
        sample.segment_version = version
        self.engine.submit_request(self.engine.make_request(sample.request_id, prompt_ids, params))
        self.running[sample.request_id] = sample

    def _resume(self, version: int) -> None:
        parked, self.parked = self.parked, []
        for sample in parked:  # parked by an abort (`park`): what resume_request resumes
            prompt_ids, params = continuation(sample.prompt_ids, sample.params, sample.token_ids)
            self._start(sample, prompt_ids, params, version)

    def _hand_back(self, group_id: str) -> FinishedGroup:
        samples = self.groups.pop(group_id)
        return FinishedGroup(
            group_id=group_id, token_ids=[s.token_ids.tolist() for s in samples],
            log_probs=[s.log_probs.tolist() for s in samples],
            min_versions=[_version(s.min_version, s.segment_version) for s in samples],
            max_versions=[_version(s.max_version, s.segment_version) for s in samples],
            num_resumes=[s.segments - 1 for s in samples])


def _version(recorded: int | None, last_segment: int) -> int:
    """A sample that generated no token at all (an immediate stop): the version of its last segment."""
    return last_segment if recorded is None else recorded
