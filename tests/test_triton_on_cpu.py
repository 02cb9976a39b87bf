"""The Triton kernels' CPU tests, run under TRITON_INTERPRET=1 in one child interpreter (the flag must be set
before triton is imported; one child for all files saves each file's ~5 s of imports). The files' own
tests skip outside that child; on a GPU they run natively under the gpu marker."""

from __future__ import annotations

from tests.triton_interpreter import run_interpreted_files

KERNEL_TEST_FILES = {  # file -> how many of its tests must pass under the interpreter
    "tests/rollout/engine/test_triton_decode.py": 15,
    "tests/rollout/engine/test_triton_prefill.py": 17,
    "tests/rollout/engine/test_fused_ops.py": 9,
    "tests/rollout/engine/test_sampling_kernel.py": 8,
    "tests/rollout/engine/test_advance_kernel.py": 6,
    "tests/algorithms/test_fused_logprob.py": 6,
}


def test_triton_kernels_under_the_interpreter():
    run_interpreted_files(KERNEL_TEST_FILES)
