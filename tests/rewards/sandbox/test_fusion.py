"""SandboxFusion client against real loopback servers: the compatible server, a flaky gateway, a dead port."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hybridrl.rewards.sandbox import LocalSandbox
from hybridrl.rewards.sandbox.fusion import (RunCodeRequest, RunCodeResponse, SandboxFusionClient, SandboxFusionError,
                                             run_code_url)
from hybridrl.rewards.sandbox.server import make_server, serve_in_thread


@pytest.fixture(scope="module")
def sandbox_url():
    server = make_server(sandbox=LocalSandbox(max_concurrent=2))
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class ScriptedGateway:
    """Answers the listed HTTP statuses in turn (200 = a fixed successful RunCodeResponse); counts requests."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses, self.requests = list(statuses), []
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                gateway.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                code = gateway.statuses.pop(0)
                body = json.dumps({"status": "Success", "message": "", "run_result": {
                    "status": "Finished", "return_code": 0, "stdout": "ok\n", "stderr": "", "execution_time": 0.1}}
                                  if code == 200 else {"detail": "busy"}).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/run_code"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_runs_code_through_the_compatible_server(sandbox_url):
    client = SandboxFusionClient(sandbox_url + "/run_code")
    response = client.run_code(RunCodeRequest("print(sum(map(int, input().split())))", stdin="2 3"))
    assert response.status == "Success" and response.run_result.stdout == "5\n"
    assert response.run_result.return_code == 0 and response.run_result.status == "Finished"


def test_async_requests_run_side_by_side(sandbox_url):
    import asyncio

    client = SandboxFusionClient(sandbox_url, max_concurrent=2)

    async def main():
        return await asyncio.gather(*(client.run_code_async(RunCodeRequest(f"print({i})")) for i in range(3)))

    assert [r.run_result.stdout for r in asyncio.run(main())] == ["0\n", "1\n", "2\n"]


def test_gateway_timeouts_are_retried_then_succeed():
    gateway = ScriptedGateway([504, 503, 200])
    try:
        client = SandboxFusionClient(gateway.url, retry_delay_seconds=0.01)
        response = client.run_code(RunCodeRequest("print('ok')", run_timeout=3, memory_limit_MB=512))
    finally:
        gateway.close()
    assert response.status == "Success" and len(gateway.requests) == 3
    assert gateway.requests[0] == {"code": "print('ok')", "language": "python", "compile_timeout": 10,
                                   "run_timeout": 3, "memory_limit_MB": 512, "stdin": None, "files": {},
                                   "fetch_files": []}


def test_retries_run_out_and_refusals_are_not_retried():
    gateway = ScriptedGateway([504, 504, 504, 422])
    try:
        client = SandboxFusionClient(gateway.url, max_attempts=3, retry_delay_seconds=0.01)
        with pytest.raises(SandboxFusionError, match=r"after 3 attempt\(s\): HTTP 504"):
            client.run_code(RunCodeRequest("1"))
        with pytest.raises(SandboxFusionError, match=r"after 1 attempt\(s\): HTTP 422.*sandbox_fusion.url"):
            client.run_code(RunCodeRequest("1"))
    finally:
        gateway.close()
    assert len(gateway.requests) == 4


def test_a_dead_endpoint_names_the_url_and_the_fix():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = SandboxFusionClient(f"http://127.0.0.1:{port}", max_attempts=2, retry_delay_seconds=0.01)
    with pytest.raises(SandboxFusionError, match=rf"127.0.0.1:{port}/run_code failed after 2 attempt.*Refused"):
        client.run_code(RunCodeRequest("1"))


def test_urls_and_response_parsing():
    assert run_code_url("http://h:8080") == "http://h:8080/run_code"
    assert run_code_url("http://h:8080/run_code") == "http://h:8080/run_code"
    assert run_code_url("https://faas.example/api/v1/run") == "https://faas.example/api/v1/run"
    with pytest.raises(ValueError, match="not an http"):
        run_code_url("localhost:8080")
    parsed = RunCodeResponse.from_json({"status": "Failed", "compile_result": {"status": "Error", "stderr": "x",
                                                                                "extra": 1}, "run_result": None})
    assert parsed.compile_result.status == "Error" and parsed.run_result is None
    with pytest.raises(SandboxFusionError, match="not a RunCodeResponse"):
        RunCodeResponse.from_json({"detail": "nope"})
