"""Run a test file's Triton tests on CPU: TRITON_INTERPRET=1 must be set before triton is imported, so
the file re-runs itself in a subprocess with it set (nothing leaks into the main test process)."""

from __future__ import annotations

import atexit
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
REPO = Path(__file__).resolve().parents[1]
KERNEL_TEST_FILES = {  # file -> how many of its tests must pass under the interpreter (tests/test_triton_on_cpu.py)
    "tests/rollout/engine/test_triton_decode.py": 15,
    "tests/rollout/engine/test_triton_prefill.py": 17,
    "tests/rollout/engine/test_fused_ops.py": 9,
    "tests/rollout/engine/test_sampling_kernel.py": 8,
    "tests/rollout/engine/test_advance_kernel.py": 6,
    "tests/algorithms/test_fused_logprob.py": 6,
    "tests/models/invariant/test_kernels.py": 8,
    "tests/models/invariant/test_engine_agreement.py": 5,
}
_STARTED: dict[tuple[str, ...], tuple[subprocess.Popen, object]] = {}  # files -> the child and its output file


def run_interpreted(test_file: str, min_passed: int) -> None:
    """`run_interpreted_files` for one file (a path, absolute or repo-relative)."""
    run_interpreted_files({str(Path(test_file).resolve().relative_to(REPO)): min_passed})


def run_interpreted_files(min_passed: dict[str, int]) -> None:
    """Run the files' non-GPU tests in ONE TRITON_INTERPRET=1 subprocess (each child pays ~5 s of torch and
    triton imports on the 2-core box); fails with its output unless each file (repo-relative path) passed at
    least its minimum (so a suite that silently skips everything cannot pass)."""
    if INTERPRETED:
        pytest.skip("already inside the interpreter subprocess")
    pytest.importorskip("triton", reason="pip install triton to test the Triton kernels on CPU")
    start_interpreted_files(min_passed)
    child, output = _STARTED.pop(tuple(min_passed))
    returncode = child.wait(timeout=600)
    output.seek(0)
    stdout = output.read()
    assert returncode == 0, f"interpreted Triton tests failed:\n{stdout[-8000:]}"
    for path, least in min_passed.items():
        passed = len(re.findall(rf"^{re.escape(path)}::\S+ PASSED", stdout, flags=re.MULTILINE))
        assert passed >= least, f"{path}: {passed} interpreted tests passed, expected >= {least}:\n{stdout[-3000:]}"


def start_interpreted_files(files: dict[str, int]) -> None:
    """Start the child for `files` now, unless it runs already (or triton is missing): started at collection
    (conftest.py), its ~40 s run on the 2-core box overlaps the tests before it, on the core the main process
    leaves idle most of the time; `run_interpreted_files` waits for it. A child the session did not wait for is
    killed at exit."""
    if INTERPRETED or tuple(files) in _STARTED or importlib.util.find_spec("triton") is None:
        return
    cmd = [sys.executable, "-m", "pytest", *files, "-v", "-x", "-p", "no:cacheprovider", "-o", "addopts=",
           "-m", "not gpu"]
    output = tempfile.TemporaryFile("w+")  # a file, not a pipe: nobody reads while the child runs
    child = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "TRITON_INTERPRET": "1"}, stdout=output,
                             stderr=subprocess.STDOUT, text=True)
    _STARTED[tuple(files)] = (child, output)


@atexit.register
def _kill_unwaited_children() -> None:
    for child, _ in _STARTED.values():
        child.kill()


def on_device(device: str) -> str:
    """For tests parametrized over DEVICES: cpu runs only inside the interpreter subprocess, cuda only
    with a GPU (and the gpu marker)."""
    if device == "cpu" and not INTERPRETED:
        pytest.skip("runs in the TRITON_INTERPRET=1 subprocess")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA device")
    return device


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
