"""Run a test file's Triton tests on CPU: TRITON_INTERPRET=1 must be set before triton is imported, so
the file re-runs itself in a subprocess with it set (nothing leaks into the main test process)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
REPO = Path(__file__).resolve().parents[1]


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
    cmd = [sys.executable, "-m", "pytest", *min_passed, "-v", "-x", "-p", "no:cacheprovider", "-o", "addopts=",
           "-m", "not gpu"]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"interpreted Triton tests failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    for path, least in min_passed.items():
        passed = len(re.findall(rf"^{re.escape(path)}::\S+ PASSED", proc.stdout, flags=re.MULTILINE))
        assert passed >= least, f"{path}: {passed} interpreted tests passed, expected >= {least}:\n{proc.stdout[-3000:]}"


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
