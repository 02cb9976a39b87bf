"""process_alive on real processes: a running child, the same child once it has exited and been reaped, and a
process of another user."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hybridrl.utils.processes import process_alive


def test_a_running_child_is_alive_and_a_reaped_one_is_not():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert process_alive(child.pid)
    finally:
        child.communicate(input=b"", timeout=30)  # EOF on stdin ends it; communicate waits and reaps it
    assert child.returncode == 0
    assert not process_alive(child.pid)


def test_this_process_is_alive():
    assert process_alive(os.getpid())


NOBODY = 65534


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="checks as user nobody, which takes root to become")
def test_a_process_of_another_user_is_alive():
    """As user nobody, this (root's) process cannot be signalled: PermissionError, which means it exists. A forked
    child drops to nobody (exec'ing a fresh interpreter as nobody may be refused by the venv's permissions) and
    reports through a pipe whether the signal was refused and what process_alive says."""
    parent = os.getpid()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the child: no pytest machinery, only the check and os._exit
        try:
            os.close(read_end)
            os.setuid(NOBODY)
            try:
                os.kill(parent, 0)
                refused = False
            except PermissionError:
                refused = True
            os.write(write_end, f"{refused} {process_alive(parent)}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        report = pipe.read()
    os.waitpid(child, 0)
    assert report.split() == ["True", "True"]
