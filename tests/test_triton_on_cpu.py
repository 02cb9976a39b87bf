"""The Triton kernels' CPU tests, run under TRITON_INTERPRET=1 in one child interpreter (the flag must be set
before triton is imported; one child for all files saves each file's ~5 s of imports). The files' own
tests skip outside that child; on a GPU they run natively under the gpu marker. The child starts when the session
has collected this test (conftest.py), so it runs beside the tests before it."""

from __future__ import annotations

from tests.triton_interpreter import KERNEL_TEST_FILES, run_interpreted_files


def test_triton_kernels_under_the_interpreter():
    run_interpreted_files(KERNEL_TEST_FILES)
