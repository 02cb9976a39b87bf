"""The local sandbox with real processes: limits enforced, output captured and capped, nothing left behind."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from hybridrl.rewards.sandbox import LocalSandbox, SandboxError, SandboxLimits
from hybridrl.rewards.sandbox.records import CPU_LIMIT, ERROR, MEMORY_LIMIT, OK, TIMEOUT

LIMITS = SandboxLimits(wall_seconds=20, cpu_seconds=5, memory_mb=256, max_processes=32)


@pytest.fixture(scope="module")
def sandbox() -> LocalSandbox:
    return LocalSandbox(LIMITS, max_concurrent=2)


def leftover_sandbox_processes() -> list[int]:
    """Processes whose working directory is a sandbox's (deleted or not)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if "hybridrl-sandbox-" in os.readlink(f"/proc/{entry}/cwd"):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def test_stdin_in_stdout_out(sandbox):
    result = sandbox.run("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", stdin="1 2\n3\n")
    assert (result.status, result.exit_code, result.stdout, result.stderr) == (OK, 0, "6\n", "")
    assert result.cpu_seconds is not None and result.cpu_seconds >= 0


def test_exit_code_and_exception_are_reported(sandbox):
    exited = sandbox.run("import sys\nsys.stderr.write('bye')\nsys.exit(3)")
    assert (exited.status, exited.exit_code, exited.stderr) == (ERROR, 3, "bye")
    raised = sandbox.run("raise ValueError('boom')")
    assert raised.status == ERROR and raised.exit_code == 1 and "ValueError: boom" in raised.stderr


def test_infinite_loop_is_stopped_by_the_cpu_limit(sandbox):
    result = sandbox.run("while True:\n    pass", limits=SandboxLimits(wall_seconds=30, cpu_seconds=1))
    assert result.status == CPU_LIMIT and result.exit_code is None
    assert result.cpu_seconds > 0.5  # rusage ticks are coarse


def test_memory_hog_is_stopped_by_the_address_space_limit(sandbox):
    result = sandbox.run("block = bytearray(512 * 1024 * 1024)\nprint('allocated')")
    assert result.status == MEMORY_LIMIT and "MemoryError" in result.stderr and result.stdout == ""


def test_sleep_that_ignores_sigterm_is_killed_at_the_wall_clock(sandbox):
    code = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\n"
            "time.sleep(60)")
    result = sandbox.run(code, limits=SandboxLimits(wall_seconds=6, kill_grace_seconds=0.2))
    assert result.status == TIMEOUT and result.stdout == "ready\n"
    assert leftover_sandbox_processes() == []


def test_background_children_die_with_the_run(sandbox):
    code = ("import subprocess, sys\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
            "print('spawned')")
    result = sandbox.run(code)
    assert result.status == OK and result.stdout == "spawned\n"
    if sandbox.isolation.pid_namespace:  # a child in its own session escapes the process group otherwise
        assert leftover_sandbox_processes() == []


def test_fork_bomb_is_contained(sandbox):
    result = sandbox.run("import os\nwhile True:\n    os.fork()", limits=SandboxLimits(wall_seconds=5, max_processes=16))
    assert result.status != OK
    if sandbox.isolation.process_limit:
        assert "BlockingIOError" in result.stderr or "Resource temporarily unavailable" in result.stderr
    assert leftover_sandbox_processes() == []


def test_network_connect_fails_where_isolation_is_claimed(sandbox):
    if not sandbox.isolation.network_namespace:
        pytest.skip(f"no network isolation here: {sandbox.isolation.describe()}")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    result = sandbox.run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('connected')")
    listener.close()
    assert result.status == ERROR and "connected" not in result.stdout and "OSError" in result.stderr
    assert accepted == []


def test_output_is_capped_and_the_cap_reported(sandbox):
    result = sandbox.run("print('x' * 100000)", limits=SandboxLimits(max_output_bytes=1000))
    assert result.status == OK and result.stdout == "x" * 1000
    assert result.stdout_bytes == 100001 and result.stdout_truncated and not result.stderr_truncated
    assert "stdout truncated to 1000 of 100001 bytes" in result.summary()


def test_files_in_and_out_and_a_private_working_directory(sandbox):
    code = "data = open('in.txt').read()\nopen('out.txt', 'w').write(data.upper())\nimport os\nprint(os.getcwd())"
    result = sandbox.run(code, files={"in.txt": b"abc"}, fetch_files=("out.txt", "missing.txt"))
    assert result.status == OK and result.files == {"out.txt": b"ABC"}
    assert "hybridrl-sandbox-" in result.stdout
    with pytest.raises(SandboxError, match="leaves the sandbox"):
        sandbox.run("pass", files={"../escape.txt": b""})


def test_bash_and_unknown_languages(sandbox):
    assert sandbox.run("read x; echo $((x * 2))", stdin="21\n", language="bash").stdout == "42\n"
    with pytest.raises(SandboxError, match="'cobol' is not supported.*bash.*python"):
        sandbox.run("x", language="cobol")


def test_run_async_runs_side_by_side_from_asyncio(sandbox):
    async def main():
        return await asyncio.gather(*(sandbox.run_async(f"print({i} * {i})") for i in range(4)))

    results = asyncio.run(main())
    assert [r.stdout for r in results] == ["0\n", "1\n", "4\n", "9\n"]


def test_isolation_is_described_honestly(sandbox):
    isolation = sandbox.isolation
    text = isolation.describe()
    assert ("no network" in text) == isolation.network_namespace
    assert ("NOT isolated" in text) == bool(isolation.missing)
    unisolated = LocalSandbox(isolate=False).isolation
    assert not unisolated.network_namespace and "network" in " ".join(unisolated.missing)


def test_an_orphaned_run_is_killed_by_its_own_backstop():
    """The caller enforces the wall clock; if it dies, the sandbox's first process kills the program itself."""
    from hybridrl.rewards.sandbox.local import BOOTSTRAP

    status_read, status_write = os.pipe()
    spec = {"argv": [sys.executable, "-c", "import time; time.sleep(60)"], "env": {}, "status_fd": status_write,
            "backstop_seconds": 1}
    process = subprocess.Popen([sys.executable, "-I", BOOTSTRAP, json.dumps(spec)], pass_fds=(status_write,))
    os.close(status_write)
    try:
        assert process.wait(timeout=30) == 0  # returned long before the program's 60 s sleep
    finally:
        process.kill()
    report = json.loads(os.read(status_read, 4096))
    os.close(status_read)
    assert report["signal"] == 9 and report["exit_code"] is None
