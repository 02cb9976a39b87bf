"""Code rewards in the local sandbox (verl prime_code): the APPS harness's verdicts and verl's scoring rule."""

from __future__ import annotations

import json

import pytest

from hybridrl.rewards.code_harness import stdin_output_matches, wrap_stdin_program
from hybridrl.rewards.prime_code import check_correctness, compute_score, extract_code

STDIN_CASES = {"inputs": ["1 2\n", "3 4\n", "5 5\n"], "outputs": ["3\n", "7\n", "10\n"]}
FN_CASES = {"fn_name": "add", "inputs": ["1\n2", "3\n4"], "outputs": ["3", "7"]}
ADD = "a, b = map(int, input().split())\nprint(a + b)"


@pytest.mark.parametrize("lines, expected, verdict", [
    (["3"], "3\n", True),
    (["3 "], "3", True),                      # stripped text
    (["1", "", "2"], "1\n2", True),            # empty lines dropped
    (["1.0000001"], "1.0", True),              # numbers within numpy.allclose
    (["1.1"], "1.0", False),
    (["01"], "1", False),                      # integer lines compare as text
    (["a b"], "b a", False),
    ([], "", True),
])
def test_output_comparison(lines, expected, verdict):
    assert stdin_output_matches(lines, expected) is verdict


def test_stdin_programs_are_wrapped_into_a_function():
    wrapped = wrap_stdin_program("import sys\nx = 1\nif __name__ == '__main__':\n    print(x)")
    assert wrapped == "import sys\nstdin = sys.stdin\nstdout = sys.stdout\ndef code():\n\tx = 1\n\tprint(x)\n"


def test_extract_code():
    assert extract_code("text ```python\nprint(1)\n``` more") == "\nprint(1)\n"
    assert extract_code("print(2)") == "print(2)"


def test_verdicts_of_one_harness_run():
    assert check_correctness(STDIN_CASES, ADD, timeout=5) == [True, True, True]
    assert check_correctness(STDIN_CASES, "print(3)", timeout=5) == [True, False]  # stops at the first failure
    assert check_correctness(STDIN_CASES, "syntax error(", timeout=5) == [-2]
    assert check_correctness(STDIN_CASES, "print(1/0)", timeout=5) == [-1]
    assert check_correctness(STDIN_CASES, "exit()", timeout=5) == [-1]  # exit is disabled, as in verl
    assert check_correctness(FN_CASES, "def add(a, b):\n    return a + b", timeout=5) == [True, True]
    assert check_correctness(FN_CASES, "class Solution:\n    def add(self, a, b):\n        return a + b",
                             timeout=5) == [True, True]
    assert check_correctness(FN_CASES, "def add(a, b):\n    return {1, 2}", timeout=5) == [-1]  # not JSON


def test_a_solution_that_runs_too_long_fails_every_test():
    assert check_correctness(STDIN_CASES, "while True:\n    pass", timeout=1) == [-1, -1, -1]


def test_scores_all_pass_and_partial_credit():
    assert compute_score(f"```python\n{ADD}\n```", json.dumps(STDIN_CASES), continuous=True) == (
        1.0, [True, True, True])
    wrong_middle = "a, b = map(int, input().split())\nprint(a * b if a == 3 else a + b)"
    assert compute_score(wrong_middle, STDIN_CASES, continuous=True) == (2 / 3, [True, False, True])
    assert compute_score(wrong_middle, STDIN_CASES, continuous=False)[0] == 0.0


def test_function_problems_get_no_partial_credit():
    # verl's per-test runs drop fn_name, so they run the code as a stdin program: nothing is printed
    half = "def add(a, b):\n    return 3"
    assert compute_score(half, FN_CASES, continuous=True) == (0.0, [False, False])


def test_malformed_test_cases_score_zero():
    assert compute_score("print(1)", "not json", continuous=True) == (0.0, [])
    assert compute_score("print(1)", {"inputs": ["1", "2"], "outputs": ["1"]}, continuous=True)[0] == 0.0
    assert compute_score("print(1)", {"inputs": [], "outputs": []}, continuous=True)[0] == 1.0  # as verl: no test
    assert compute_score("print(input())", {"inputs": ["x"], "outputs": [["x"]]}, continuous=True)[0] == 0.0
