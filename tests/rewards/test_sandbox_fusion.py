"""Code rewards through SandboxFusion (verl sandbox_fusion), against a real loopback SandboxFusion-compatible server."""

from __future__ import annotations

import json

import pytest

from hybridrl.rewards import default_compute_score
from hybridrl.rewards.sandbox import LocalSandbox
from hybridrl.rewards.sandbox.fusion import CommandRunResult, RunCodeResponse
from hybridrl.rewards.sandbox.server import make_server, serve_in_thread
from hybridrl.rewards.sandbox_fusion import case_result, compute_score, extract_solution, function_wrapper

CASES = {"inputs": ["1 2\n", "3 4\n", "5 5\n"], "outputs": ["3\n", "7\n", "10\n"]}
ADD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


@pytest.fixture(scope="module")
def url():
    server = make_server(sandbox=LocalSandbox(max_concurrent=2))
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}/run_code"
    server.shutdown()
    server.server_close()


def test_extract_solution():
    assert extract_solution("x ```python\nprint(1)\n``` y ```python\nprint(2)\n```") == "\nprint(2)\n"
    assert extract_solution("```py\nprint(1)\n```") == "print(1)\n"  # a language line is dropped
    assert extract_solution("```\nprint(1)```") == "\nprint(1)"  # an empty first line is not a language name
    assert extract_solution("print(1)") is None


def test_case_results_follow_sandboxfusion_statuses():
    finished = CommandRunResult("Finished", 0.1, 0, "3\n", "")
    assert case_result(RunCodeResponse("Success", run_result=finished), "3") == (True, "success")
    assert case_result(RunCodeResponse("Success", run_result=finished), "4") == (False, "wrong_answer")
    assert case_result(RunCodeResponse("Success", run_result=finished), None) == (True, "success")
    crashed = CommandRunResult("Finished", 0.1, 1, "", "Traceback")
    assert case_result(RunCodeResponse("Failed", run_result=crashed), "3") == (-2, "runtime_error")
    slow = CommandRunResult("TimeLimitExceeded", 10.0, None, "", "")
    assert case_result(RunCodeResponse("Failed", run_result=slow), "3") == (-3, "timeout")
    bad_compile = CommandRunResult("Finished", 0.1, 1, "", "error")
    assert case_result(RunCodeResponse("Failed", compile_result=bad_compile), "3") == (-4, "compile_error")
    assert case_result(RunCodeResponse("SandboxError", "boom"), "3") == (-1, "sandbox_error")


def test_scores_through_the_server(url):
    assert compute_score(url, None, 256, ADD, json.dumps(CASES), continuous=True)[0] == 1.0
    wrong_middle = "```python\na, b = map(int, input().split())\nprint(a * b if a == 3 else a + b)\n```"
    score, metadata = compute_score(url, None, 256, wrong_middle, CASES, continuous=True)
    assert score == pytest.approx(2 / 3) and [m["status"] for m in metadata] == ["success", "wrong_answer", "success"]
    crash = "```python\nraise SystemExit(2)\n```"
    assert compute_score(url, None, 256, crash, CASES)[0] == 0.0
    assert compute_score(url, None, 256, "no code block", CASES) == (
        0.0, [{"error": "Invalid completion (missing code block)"}])
    assert compute_score(url, None, 256, ADD, "{broken")[0] == 0.0
    assert compute_score(url, None, 256, ADD, {"inputs": [], "outputs": []})[0] == 0.0  # unlike prime_code


def test_function_and_assert_cases(url):
    fn_cases = {"fn_name": "pair", "inputs": ["1\n2"], "outputs": ["[1, 2]"]}
    assert compute_score(url, None, 256, "```python\ndef pair(a, b):\n    return (a, b)\n```", fn_cases)[0] == 1.0
    asserts = {"assert_case": ["assert add(1, 2) == 3", "assert add(1, 1) == 3"]}
    assert compute_score(url, None, 256, "```python\ndef add(a, b):\n    return a + b\n```", asserts)[0] == 0.5
    assert "def _hybridrl_call" in function_wrapper("x = 1", "f")


def test_only_the_first_ten_cases_count_with_continuous(url):
    cases = {"inputs": [str(i) for i in range(12)], "outputs": [str(i) if i < 10 else "x" for i in range(12)]}
    echo = "```python\nprint(input())\n```"
    assert compute_score(url, 2, 256, echo, cases, continuous=True)[0] == 1.0
    assert compute_score(url, 2, 256, echo, cases, continuous=False)[0] == pytest.approx(10 / 12)


def test_dispatch_uses_the_url_for_code_sources(url):
    assert default_compute_score("codecontests", ADD, json.dumps(CASES), sandbox_fusion_url=url,
                                 memory_limit_mb=256) == 1.0
    assert default_compute_score("apps", ADD, json.dumps(CASES)) == 1.0  # no url: the local sandbox
