"""Code rewards by running the solution against test cases in the local sandbox (verl `prime_code`; the
`codecontests`, `apps`, `codeforces`, `taco` data sources when no SandboxFusion url is set).

`test_cases` (dict or JSON): {"inputs": [...], "outputs": [...]} and, for LeetCode-style problems,
"fn_name". The solution is the text after the last "```python" up to the next "```" (the whole text
when there is no fence). Score, as verl: 1.0 if every test passes when all run in one process (5 s per
test); otherwise, with `continuous`, the fraction of the first 10 tests that pass when each runs alone
(10 s); without it, 0.0. As in verl, the one-test-at-a-time runs drop "fn_name", so function-style
problems only earn credit by passing every test.

The tests run in `code_harness.py` inside a `LocalSandbox` (separate process, no network where the
machine allows it, `memory_mb` address-space limit: verl sets none); verl runs them in a forked process
of the trainer, guarded only by `reliability_guard`.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from pathlib import Path
from typing import Any

from hybridrl.rewards.sandbox import LocalSandbox, SandboxLimits

HARNESS = Path(__file__).with_name("code_harness.py").read_text()
ALL_TESTS_TIMEOUT, ONE_TEST_TIMEOUT, CONTINUOUS_TESTS = 5, 10, 10
DEFAULT_MEMORY_MB = 1024

_sandbox: LocalSandbox | None = None
_sandbox_lock = threading.Lock()


def shared_sandbox() -> LocalSandbox:
    """One sandbox per process (its semaphore bounds concurrent test runs to the number of cores)."""
    global _sandbox
    with _sandbox_lock:
        if _sandbox is None:
            _sandbox = LocalSandbox(max_concurrent=max(1, os.cpu_count() or 1))
        return _sandbox


def extract_code(completion: str) -> str:
    return completion.split("```python")[-1].split("```")[0]


def check_correctness(in_outs: dict, code: str, timeout: int, memory_mb: int | None = DEFAULT_MEMORY_MB,
                      sandbox: LocalSandbox | None = None) -> list:
    """Per-test results of one harness run: True, False, -1 (runtime error / killed), -2 (compile error)."""
    nonce = f"@@hybridrl-results-{secrets.token_hex(8)}@@"
    job = json.dumps({"code": code, "in_outs": in_outs, "timeout": timeout, "nonce": nonce})
    # verl's outer limit: the run is abandoned one second after the per-test alarm would have fired.
    limits = SandboxLimits(wall_seconds=timeout + 1, cpu_seconds=None, memory_mb=memory_mb, max_output_bytes=1 << 16)
    result = (sandbox or shared_sandbox()).run(HARNESS, files={"job.json": job.encode()}, limits=limits)
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(nonce):
            return json.loads(line[len(nonce):])
    return [-1] * len(in_outs["inputs"])  # killed (alarm, wall clock, memory) before reporting


def compute_score(completion: str, test_cases: Any, continuous: bool = False,
                  memory_mb: int | None = DEFAULT_MEMORY_MB) -> tuple[float, list]:
    """(score, per-test results of the runs made), as verl's prime_code.compute_score."""
    code = extract_code(completion)
    try:
        cases = test_cases if isinstance(test_cases, dict) else json.loads(test_cases)
        results = check_correctness(cases, code, ALL_TESTS_TIMEOUT, memory_mb)
        if all(result is True for result in results):
            return 1.0, results
        if not continuous or len(cases["outputs"]) < len(cases["inputs"]):
            return 0.0, results  # verl pairs inputs with outputs by index first; a missing output scores 0
        per_test: list = []
        for index, (test_input, test_output) in enumerate(zip(cases["inputs"], cases["outputs"])):
            if index >= CONTINUOUS_TESTS:
                break
            per_test.extend(check_correctness({"inputs": [test_input], "outputs": [test_output]}, code,
                                              ONE_TEST_TIMEOUT, memory_mb))
        return sum(result is True for result in per_test) / (len(per_test) or 1), per_test
    except (ValueError, TypeError, KeyError, AttributeError):  # malformed test cases (verl scores them 0)
        return 0.0, []
