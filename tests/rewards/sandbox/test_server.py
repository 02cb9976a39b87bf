"""The SandboxFusion-compatible server over the local sandbox, spoken to over real loopback HTTP."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest

from hybridrl.rewards.sandbox import LocalSandbox
from hybridrl.rewards.sandbox.server import make_server, serve_in_thread


@pytest.fixture(scope="module")
def url():
    server = make_server(sandbox=LocalSandbox(max_concurrent=2))
    serve_in_thread(server)
    yield f"http://127.0.0.1:{server.server_address[1]}/run_code"
    server.shutdown()
    server.server_close()


def post(url: str, payload) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_success_with_stdin_files_and_fetched_files(url):
    code = "x = int(input())\nopen('out.txt', 'w').write(open('in.txt').read() * x)\nprint(x + 1)"
    status, body = post(url, {"code": code, "language": "python", "stdin": "2", "run_timeout": 10,
                              "files": {"in.txt": base64.b64encode(b"ab").decode()}, "fetch_files": ["out.txt"]})
    assert status == 200 and body["status"] == "Success" and body["compile_result"] is None
    run = body["run_result"]
    assert (run["status"], run["return_code"], run["stdout"], run["stderr"]) == ("Finished", 0, "3\n", "")
    assert base64.b64decode(body["files"]["out.txt"]) == b"abab"


def test_failures_are_reported_as_sandboxfusion_does(url):
    _, crashed = post(url, {"code": "raise SystemExit(4)", "language": "python"})
    assert crashed["status"] == "Failed" and crashed["run_result"]["status"] == "Finished"
    assert crashed["run_result"]["return_code"] == 4
    _, slow = post(url, {"code": "import time; time.sleep(30)", "language": "python", "run_timeout": 1})
    assert slow["status"] == "Failed" and slow["run_result"]["status"] == "TimeLimitExceeded"
    _, other = post(url, {"code": "int main(){}", "language": "cpp"})
    assert other["status"] == "SandboxError" and "not supported" in other["message"]


def test_malformed_requests_get_422_and_unknown_paths_404(url):
    assert post(url, {"language": "python"})[0] == 422
    status, body = post(url, {"code": "1", "language": "klingon"})
    assert status == 422 and "klingon" in body["detail"]
    assert post(url.replace("/run_code", "/nope"), {"code": "1", "language": "python"})[0] == 404
