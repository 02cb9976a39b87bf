"""make_sandbox: the same SandboxResult whether the local sandbox or a SandboxFusion endpoint runs the code."""

from __future__ import annotations

import asyncio
import socket

import pytest

from hybridrl.rewards.sandbox import FusionSandbox, LocalSandbox, SandboxLimits, make_sandbox
from hybridrl.rewards.sandbox.records import ERROR, OK, SANDBOX_ERROR, TIMEOUT
from hybridrl.rewards.sandbox.server import make_server, serve_in_thread


@pytest.fixture(scope="module")
def url():
    server = make_server(sandbox=LocalSandbox(max_concurrent=2))
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}/run_code"
    server.shutdown()
    server.server_close()


def test_make_sandbox_picks_by_url(url):
    assert isinstance(make_sandbox(), LocalSandbox)
    remote = make_sandbox(url)
    assert isinstance(remote, FusionSandbox) and remote.isolation.describe().startswith("ran by the SandboxFusion")


def test_results_through_sandboxfusion(url):
    sandbox = make_sandbox(url, SandboxLimits(wall_seconds=2, max_output_bytes=4))
    ok = sandbox.run("print(input() * 3)", stdin="ab")
    assert (ok.status, ok.exit_code, ok.stdout, ok.stdout_bytes, ok.stdout_truncated) == (OK, 0, "abab", 7, True)
    failed = sandbox.run("raise SystemExit(5)")
    assert (failed.status, failed.exit_code) == (ERROR, 5)
    assert sandbox.run("import time; time.sleep(10)").status == TIMEOUT
    assert sandbox.run("int main(){}", language="cpp").status == SANDBOX_ERROR


def test_async_and_an_unreachable_service():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sandbox = FusionSandbox(f"http://127.0.0.1:{port}")
    sandbox.client.max_attempts, sandbox.client.retry_delay = 1, 0.0
    result = asyncio.run(sandbox.run_async("print(1)"))
    assert result.status == SANDBOX_ERROR and "failed after 1 attempt" in result.stderr
