"""The APPS test harness verl's `prime_code` runs, as a program for the sandbox (stdlib only).

Reads `job.json` ({"code", "in_outs", "timeout", "nonce"}) from its working directory, runs the solution
against every test the way verl's `testing_util.run_test` does, and prints `<nonce><json results>` as
its last line on the original stdout. Results per test: True (passed), False (wrong answer, then it
stops), -1 (runtime error, then it stops), -2 (did not compile). A test that runs past `timeout` gets
SIGALRM, which (no handler, as in verl) kills the whole run: the caller then counts every test as -1.

What the solution sees is verl's: a star-import prelude, stdin programs wrapped in a `code()` function
with `sys.stdin`/`open` patched to the test input, stdout captured only while the test runs, and
`reliability_guard` (exit/quit, os.system, os.remove, subprocess, ... set to None).
"""

import ast
import faulthandler
import json
import os
import signal
import sys
import types
from io import StringIO
from unittest.mock import mock_open, patch

PRELUDE = ("from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
           "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
           "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
           "from io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
           "import string\nimport re\nimport datetime\nimport collections\nimport heapq\nimport bisect\nimport copy\n"
           "import math\nimport random\nimport statistics\nimport itertools\nimport functools\nimport operator\n"
           "import io\nimport sys\nimport json\nsys.setrecursionlimit(6*10**5)\n")
_OS_DISABLED = ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
                "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown",
                "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir")


def reliability_guard() -> None:
    """verl's guard: not a security boundary (the sandbox is), but it changes what solutions can call."""
    import builtins
    import shutil
    import subprocess

    faulthandler.disable()
    builtins.exit, builtins.quit, builtins.help = None, None, None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in _OS_DISABLED:
        setattr(os, name, None)
    shutil.rmtree, shutil.move, shutil.chown = None, None, None
    subprocess.Popen = None
    for module in ("ipdb", "joblib", "resource", "psutil", "tkinter", "subprocess", "ctypes"):
        sys.modules[module] = None


def wrap_stdin_program(code: str) -> str:
    """Drop a trailing `if __name__ == '__main__':`, and indent the body into `def code():` (imports stay)."""
    try:
        tree = ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            code = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:
        pass
    lines = [(line if line.startswith(("from ", "import ")) else "\t" + line) + "\n" for line in code.split("\n")]
    wrapped, started = "", False
    for line in lines:
        if line.startswith("\t") and not started:
            wrapped += "stdin = sys.stdin\nstdout = sys.stdout\ndef code():\n" + line
            started = True
        elif started and line.startswith(("from ", "import ")):
            wrapped += "\t" + line
        else:
            wrapped += line
    return wrapped


def load(source: str, class_based: bool):
    """The solution module (or its Solution()); -2 results on failure are the caller's."""
    module = types.ModuleType("tmp_sol")
    exec(compile(source, "<string>", "exec"), module.__dict__)
    sys.modules["tmp_sol"] = module
    return module.Solution() if class_based else module


def call_with_stdin(method, inputs: str) -> None:
    lines = iter(inputs.split("\n"))

    @patch("builtins.open", mock_open(read_data=inputs))
    @patch("sys.stdin", StringIO(inputs))
    @patch("sys.stdin.readline", lambda *args: next(lines))
    @patch("sys.stdin.readlines", lambda *args: inputs.split("\n"))
    @patch("sys.stdin.read", lambda *args: inputs)
    def inner(method):
        try:
            return method()
        except SystemExit:
            pass

    return inner(method)


def _floats_close(got: list, want: list) -> bool:
    """numpy.allclose(got, want) with its defaults (rtol 1e-5, atol 1e-8), for equal-length float lists."""
    return all(g == w or (abs(g - w) <= 1e-8 + 1e-5 * abs(w) and abs(w) != float("inf"))
               for g, w in zip(got, want))


def stdin_output_matches(lines: list[str], expected: str) -> bool:
    """verl's ladder of comparisons for a stdin program's output lines against the expected text."""
    if "\n".join(lines).strip() == expected.strip() or "\n".join(o.strip() for o in lines).strip() == expected.strip():
        return True
    expected_lines = [line.strip() for line in expected.split("\n") if line]
    nonempty = [line for line in lines if line]
    if lines == expected_lines or nonempty == expected_lines:
        return True
    if len(nonempty) != len(expected_lines):
        return False
    if all(a.isdigit() and b.isdigit() for a, b in zip(nonempty, expected_lines)):
        return False  # integer lines must match as text
    try:
        return _floats_close([float(a) for a in nonempty], [float(b) for b in expected_lines])
    except ValueError:
        return False


def _int_keys(value):
    """JSON forces string keys; verl turns a leading dict's keys back into ints (when they all are)."""
    try:
        if isinstance(value, dict):
            return [{int(k): v for k, v in value.items()}]
    except Exception:
        pass
    try:
        if isinstance(value[0], dict):
            return [{int(k): v for k, v in value[0].items()}]
    except Exception:
        pass
    return value


def run_call_based(method, raw_input: str, raw_output: str, timeout: int):
    """True/False/-1 for one call-based test (the function's return value against the JSON output)."""
    inputs = [json.loads(line) for line in raw_input.split("\n")]
    expected = _int_keys(json.loads(raw_output))
    try:
        if isinstance(inputs[0], dict):
            inputs = [{int(k): v for k, v in inputs[0].items()}]
    except Exception:
        pass
    signal.alarm(timeout)
    try:
        output = method(*inputs)
        json.dumps(output)  # a result JSON cannot express is a runtime error, as in verl
        output = list(output) if isinstance(output, tuple) else output
        matched = output == expected
        if isinstance(expected, list) and expected:
            matched = matched or (output == expected[0])
        try:
            if isinstance(output[0], tuple):
                matched = matched or ([list(x) for x in output] == expected[0])
        except Exception:
            pass
        signal.alarm(0)
        return matched
    except Exception:
        signal.alarm(0)
        return -1


def run_stdin_based(method, inputs, expected, timeout: int):
    """True/False/-1 for one stdin test: the program's printed lines against the expected output."""
    inputs = "\n".join(inputs) if isinstance(inputs, list) else inputs
    expected = "\n".join(expected) if isinstance(expected, list) else expected
    captured, saved = StringIO(), sys.stdout
    captured.close = lambda x: 1  # verl's Capturing: a solution calling sys.stdout.close() fails (TypeError)
    sys.stdout = captured
    signal.alarm(timeout)
    try:
        call_with_stdin(method, inputs)
    except Exception:
        return -1
    finally:
        signal.alarm(0)
        sys.stdout = saved
    return stdin_output_matches(captured.getvalue().splitlines(), expected)


def run_tests(code: str, in_outs: dict, timeout: int) -> list:
    """verl's run_test: results up to and including the first test that does not pass."""
    fn_name = in_outs.get("fn_name")
    source = PRELUDE + (code if fn_name is not None else wrap_stdin_program(code))
    signal.alarm(timeout)
    try:
        solution = load(source, fn_name is not None and "class Solution" in code)
        method = getattr(solution, fn_name if fn_name is not None else "code")
    except Exception:
        return [-2]
    finally:
        signal.alarm(0)
    results = []
    for index, raw_input in enumerate(in_outs["inputs"]):
        if not isinstance(raw_input, str) or not isinstance(in_outs["outputs"][index], str):
            raise TypeError("test inputs and outputs must be strings")  # verl's truncatefn asserts it: all fail
        if fn_name is not None:
            outcome = run_call_based(method, raw_input, in_outs["outputs"][index], timeout)
        else:
            outcome = run_stdin_based(method, raw_input, in_outs["outputs"][index], timeout)
        results.append(outcome)
        if outcome is not True:
            break
    return results


def main() -> None:
    with open("job.json") as file:
        job = json.load(file)
    os.remove("job.json")
    report = os.dup(1)
    sys.stdout = sys.stderr = open(os.devnull, "w")
    reliability_guard()
    try:
        results = run_tests(job["code"], job["in_outs"], job["timeout"])
    except BaseException:  # verl's worker crashed: every test counts as -1
        results = [-1] * len(job["in_outs"]["inputs"])
    plain = [True if r is True else r if isinstance(r, int) and not isinstance(r, bool) else False for r in results]
    os.write(report, (job["nonce"] + json.dumps(plain) + "\n").encode())


if __name__ == "__main__":
    main()
