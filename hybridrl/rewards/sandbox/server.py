"""A SandboxFusion-compatible `POST /run_code` endpoint backed by the local sandbox.

For tests of SandboxFusion clients, and for a machine without SandboxFusion that should still serve
code execution over HTTP: `python -m hybridrl.rewards.sandbox.server --port 8080` (loopback only unless
`--host` says otherwise). It runs `python` and `bash`; other SandboxFusion languages answer SandboxError.
"""

from __future__ import annotations

import argparse
import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from hybridrl.rewards.sandbox.fusion import LANGUAGES, CommandRunResult, RunCodeRequest, RunCodeResponse
from hybridrl.rewards.sandbox.local import LocalSandbox
from hybridrl.rewards.sandbox.records import OK, SANDBOX_ERROR, TIMEOUT, SandboxLimits, SandboxResult

_FIELDS = set(RunCodeRequest.__dataclass_fields__)


def run_request(sandbox: LocalSandbox, request: RunCodeRequest) -> RunCodeResponse:
    """Run one RunCodeRequest in `sandbox`, answering as SandboxFusion does (its `parse_run_status`)."""
    if request.language not in ("python", "bash"):
        return RunCodeResponse(status="SandboxError", message=f"language {request.language!r} is not supported by "
                               "hybridrl's local sandbox (python, bash)")
    memory = request.memory_limit_MB if request.memory_limit_MB and request.memory_limit_MB > 0 else None
    limits = SandboxLimits(wall_seconds=float(request.run_timeout), cpu_seconds=float(request.run_timeout),
                           memory_mb=memory)
    files = {path: base64.b64decode(content or "") for path, content in request.files.items()}
    result = sandbox.run(request.code, request.stdin or "", request.language, limits, files,
                         tuple(request.fetch_files))
    return _response(result)


def _response(result: SandboxResult) -> RunCodeResponse:
    if result.status == SANDBOX_ERROR:
        run = CommandRunResult("Error", result.wall_seconds, None, result.stdout, result.stderr)
        return RunCodeResponse(status="SandboxError", message=result.stderr[-500:], run_result=run)
    return_code = result.exit_code if result.exit_code is not None else -(result.signal or 0)
    run = CommandRunResult("TimeLimitExceeded" if result.status == TIMEOUT else "Finished", result.wall_seconds,
                           None if result.status == TIMEOUT else return_code, result.stdout, result.stderr)
    files = {name: base64.b64encode(data).decode() for name, data in result.files.items()}
    return RunCodeResponse(status="Success" if result.status == OK else "Failed", run_result=run, files=files)


def parse_request(body: bytes) -> RunCodeRequest:
    """A RunCodeRequest from JSON, or ValueError naming what is wrong (the server answers 422)."""
    payload = json.loads(body)
    if not isinstance(payload, dict) or not isinstance(payload.get("code"), str):
        raise ValueError("the body must be a JSON object with a string field 'code'")
    if payload.get("language") not in LANGUAGES:
        raise ValueError(f"language {payload.get('language')!r} is not one of SandboxFusion's languages")
    return RunCodeRequest(**{key: value for key, value in payload.items() if key in _FIELDS})


class _Handler(BaseHTTPRequestHandler):
    sandbox: LocalSandbox

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.rstrip("/") != "/run_code":
            return self._answer(404, {"detail": f"no endpoint {self.path}; POST /run_code"})
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            request = parse_request(body)
        except (ValueError, TypeError) as error:
            return self._answer(422, {"detail": str(error)})
        self._answer(200, run_request(self.sandbox, request).to_json())

    def _answer(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet: one line per request is noise
        pass


def make_server(host: str = "127.0.0.1", port: int = 0, sandbox: LocalSandbox | None = None) -> ThreadingHTTPServer:
    """A server bound to (host, port) (port 0 = any free one: read `server.server_address`); call serve_forever."""
    handler = type("SandboxHandler", (_Handler,), {"sandbox": sandbox or LocalSandbox()})
    return ThreadingHTTPServer((host, port), handler)


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="hybridrl-sandbox-server", daemon=True)
    thread.start()
    return thread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--max-concurrent", type=int, default=4)
    args = parser.parse_args()
    server = make_server(args.host, args.port, LocalSandbox(max_concurrent=args.max_concurrent))
    print(f"SandboxFusion-compatible endpoint on http://{args.host}:{server.server_address[1]}/run_code "
          f"({server.RequestHandlerClass.sandbox.isolation.describe()})")
    server.serve_forever()


if __name__ == "__main__":
    main()
