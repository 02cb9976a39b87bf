"""Code rewards through a SandboxFusion service (verl `sandbox_fusion`; the code data sources when
`reward_model.sandbox_fusion.url` is set): each test case is one `/run_code` request, all in flight at
once (bounded by `sandbox_fusion.max_concurrent`).

Per case: True (ran, and stdout equals the expected output up to trailing newlines), False (wrong
answer), -1 (API or sandbox error), -2 (runtime error), -3 (timeout), -4 (compile error; every later case
counts as one too). Score: passed / cases over the first 10 cases with `continuous`, over all without.
The solution is the last ```python block, else the first ``` block (a language-name first line is
dropped); a completion without a code block scores 0. LeetCode-style cases ("fn_name") run through a
wrapper that reads JSON arguments from stdin and prints the result (JSON for containers, None and bools;
str() otherwise); "assert_case" entries are appended to the code, one request each.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hybridrl.rewards.sandbox.fusion import RunCodeRequest, RunCodeResponse, SandboxFusionClient, SandboxFusionError

CONTINUOUS_CASES, DEFAULT_TIMEOUT = 10, 10
_PRELUDE = "\n".join(f"from {m} import *" for m in ("string", "re", "datetime", "collections", "heapq", "bisect",
                                                    "copy", "math", "random", "statistics", "itertools", "functools",
                                                    "operator", "io", "sys", "json", "builtins", "typing"))
_IMPORTS = "import traceback\nimport " + ", ".join(("string", "re", "datetime", "collections", "heapq", "bisect",
                                                    "copy", "math", "random", "statistics", "itertools", "functools",
                                                    "operator", "io", "sys", "json"))
_CALL = '''
def _hybridrl_call(_name):
    _raw = sys.stdin.read()
    _args = []
    if _raw.strip():
        try:
            _args = [json.loads(_line) for _line in _raw.split("\\n")]
        except json.JSONDecodeError as _error:
            sys.stderr.write(f"WrapperError: Invalid JSON input for {_name!r}: {_error}\\n")
            return None, True
    try:
        if _name in globals():
            _target = globals()[_name]
        elif "Solution" in globals():
            _target = getattr(globals()["Solution"](), _name)
        else:
            _target = None
        if not _target:
            sys.stderr.write(f"WrapperError: Function or method {_name!r} not found.\\n")
            return None, True
        return _target(*_args), False
    except Exception:
        sys.stderr.write(traceback.format_exc())
        return None, True

if __name__ == "__main__":
    _result, _failed = _hybridrl_call(%r)
    if not _failed:
        if isinstance(_result, (dict, list, tuple)) or _result is None or isinstance(_result, bool):
            print(json.dumps(_result))
        else:
            print(str(_result))
'''

_clients: dict[tuple[str, int], SandboxFusionClient] = {}
_clients_lock = threading.Lock()


def client_for(url: str, max_concurrent: int = 64) -> SandboxFusionClient:
    with _clients_lock:
        key = (url, max_concurrent)
        if key not in _clients:
            _clients[key] = SandboxFusionClient(url, max_concurrent=max_concurrent)
        return _clients[key]


def extract_solution(completion: str) -> str | None:
    if "```python" in completion:
        return completion.split("```python")[-1].split("```")[0]
    if "```" not in completion:
        return None
    solution = completion.split("```")[1]
    if "\n" in solution:
        first_line, rest = solution.split("\n", 1)
        if first_line.strip().isalpha():
            solution = rest
    return solution


def function_wrapper(code: str, fn_name: str) -> str:
    """A program that calls `fn_name` (or Solution().fn_name) on JSON arguments from stdin and prints the result."""
    return f"{_IMPORTS}\n{_PRELUDE}\n{_IMPORTS[len('import traceback') + 1:]}\n\n{code}\n" + _CALL % fn_name


def case_result(response: RunCodeResponse, expected_output: Any) -> tuple[Any, str]:
    """(True/False/-1/-2/-3/-4, status word) of one response, as verl's `_process_single_case`."""
    compile_result, run = response.compile_result, response.run_result
    if response.status == "SandboxError":
        return -1, "sandbox_error"
    if response.status == "Failed":
        if compile_result is not None and (compile_result.status in ("Error", "TimeLimitExceeded") or (
                compile_result.status == "Finished" and compile_result.return_code != 0)):
            return -4, "compile_timeout" if compile_result.status == "TimeLimitExceeded" else "compile_error"
        if run is None:
            return -1, "unknown_failure_state"
        if run.status == "TimeLimitExceeded":
            return -3, "timeout"
        if run.status == "Error" or (run.status == "Finished" and run.return_code != 0):
            return -2, "runtime_error"
        return -1, "unknown_failure"
    if response.status == "Success":
        if run is None or run.status != "Finished":
            return -1, "unexpected_success_state"
        actual = run.stdout if run.stdout is not None else ""
        if expected_output is None or str(actual).rstrip("\n") == str(expected_output).rstrip("\n"):
            return True, "success"
        return False, "wrong_answer"
    return -1, f"unknown_api_status_{response.status}"


def _run_case(client: SandboxFusionClient, code: str, stdin: Any, expected: Any, timeout: float,
              memory_limit_mb: int, fn_name: str | None) -> tuple[Any, dict]:
    program = function_wrapper(code, fn_name) if fn_name else code
    request = RunCodeRequest(program, compile_timeout=timeout, run_timeout=timeout, memory_limit_MB=memory_limit_mb,
                             stdin=None if stdin is None else str(stdin))
    try:
        response = client.run_code(request)
    except SandboxFusionError as error:
        return -1, {"status": "api_error", "api_request_error": str(error)}
    result, status = case_result(response, expected)
    run = response.run_result
    return result, {"status": status, "stdout": run.stdout if run else None, "stderr": run.stderr if run else None,
                    "exit_code": run.return_code if run else None}


def check_correctness(client: SandboxFusionClient, in_outs: dict, code: str, timeout: float = DEFAULT_TIMEOUT,
                      memory_limit_mb: int = 1024) -> tuple[list, list[dict]]:
    """Per-case results (in input order) and metadata; cases after the first compile error count as -4."""
    inputs, outputs = in_outs["inputs"], in_outs["outputs"]
    if not inputs:
        return [], []
    asserts = in_outs.get("assert_case", [""] * len(inputs))
    if len(outputs) != len(inputs) or len(asserts) != len(inputs):
        return [-1] * len(inputs), [{"error": "Input/output count mismatch", "case_index": i} for i in range(len(inputs))]
    with ThreadPoolExecutor(max_workers=min(len(inputs), 64)) as pool:
        cases = list(pool.map(lambda i: _run_case(client, code + "\n\n" + asserts[i], inputs[i], outputs[i], timeout,
                                                  memory_limit_mb, in_outs.get("fn_name")), range(len(inputs))))
    results, metadata = [case[0] for case in cases], [case[1] for case in cases]
    if -4 in results:
        first = results.index(-4)
        for index in range(first + 1, len(results)):
            if results[index] != -4:
                results[index], metadata[index]["status"] = -4, "compile_error_skipped"
    return results, metadata


def compute_score(sandbox_fusion_url: str, concurrent_semaphore: Any, memory_limit_mb: int, completion: str,
                  test_cases: Any, continuous: bool = False, timeout: float = DEFAULT_TIMEOUT,
                  max_concurrent: int = 64) -> tuple[float, list]:
    """(score, metadata) with verl's signature. `concurrent_semaphore`: an int is the most requests in flight
    (reward_model.sandbox_fusion.max_concurrent); verl's semaphore object is not needed (the client bounds them)."""
    if isinstance(concurrent_semaphore, int) and not isinstance(concurrent_semaphore, bool):
        max_concurrent = concurrent_semaphore
    solution = extract_solution(completion)
    if solution is None:
        return 0.0, [{"error": "Invalid completion (missing code block)"}]
    try:
        cases = test_cases if isinstance(test_cases, dict) else json.loads(test_cases)
    except json.JSONDecodeError:
        return 0.0, [{"error": "Invalid test_cases JSON format"}]
    if isinstance(cases, dict) and isinstance(cases.get("assert_case"), list):
        cases.setdefault("inputs", [""] * len(cases["assert_case"]))
        cases.setdefault("outputs", [None] * len(cases["assert_case"]))
    elif not cases or "inputs" not in cases or "outputs" not in cases:
        return 0.0, [{"error": "Invalid test_cases structure (missing inputs/outputs)"}]
    results, metadata = check_correctness(client_for(sandbox_fusion_url, max_concurrent), cases, solution, timeout,
                                          memory_limit_mb)
    considered = results[:CONTINUOUS_CASES] if continuous else results
    if not considered:
        return 0.0, metadata
    return sum(result is True for result in considered) / len(considered), metadata
