"""A client of SandboxFusion's HTTP API (`POST /run_code`), as verl's `sandbox_fusion` reward uses it.

Request fields (SandboxFusion's RunCodeRequest): code, language, compile_timeout, run_timeout,
memory_limit_MB, stdin, files (path -> base64), fetch_files. Response (RunCodeResponse): status
(Success | Failed | SandboxError), message, compile_result and run_result (CommandRunResult: status
Finished | Error | TimeLimitExceeded, execution_time, return_code, stdout, stderr), executor_pod_name, files.

verl's reference client retries a 504 three times with a linearly growing pause and waits
compile_timeout + run_timeout + 10 s for an answer; this one does the same, and also retries 502/503,
429 and refused or reset connections (a sandbox pool restarting), never a request the server refused.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any

RETRY_STATUSES = (429, 502, 503, 504)
# Languages SandboxFusion accepts (its `Language` literal); the local sandbox runs python and bash of them.
LANGUAGES = ("python", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash", "typescript", "sql", "rust",
             "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia", "pytest", "junit", "kotlin_script", "jest",
             "verilog", "python_gpu", "lean", "swift", "racket")


class SandboxFusionError(RuntimeError):
    """The SandboxFusion service could not be reached or did not answer with a RunCodeResponse."""


@dataclass
class RunCodeRequest:
    code: str
    language: str = "python"
    compile_timeout: float = 10
    run_timeout: float = 10
    memory_limit_MB: int = -1  # noqa: N815 - SandboxFusion's field name
    stdin: str | None = None
    files: dict[str, str | None] = field(default_factory=dict)  # path -> base64 content
    fetch_files: list[str] = field(default_factory=list)


@dataclass
class CommandRunResult:
    status: str  # Finished | Error | TimeLimitExceeded
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


@dataclass
class RunCodeResponse:
    status: str  # Success | Failed | SandboxError
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> "RunCodeResponse":
        if not isinstance(payload, dict) or "status" not in payload:
            raise SandboxFusionError(f"the sandbox answered {str(payload)[:200]!r}, not a RunCodeResponse")
        results = {key: CommandRunResult(**{k: v for k, v in payload[key].items() if k in _COMMAND_FIELDS})
                   if isinstance(payload.get(key), dict) else None for key in ("compile_result", "run_result")}
        return cls(status=payload["status"], message=payload.get("message") or "",
                   executor_pod_name=payload.get("executor_pod_name"), files=payload.get("files") or {}, **results)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_COMMAND_FIELDS = set(CommandRunResult.__dataclass_fields__)


def run_code_url(url: str) -> str:
    """verl passes the full endpoint (`http://host:8080/run_code`); a bare `http://host:8080` gets `/run_code`."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"sandbox_fusion url {url!r} is not an http(s) URL; use e.g. http://localhost:8080/run_code")
    return url.rstrip("/") + "/run_code" if parsed.path in ("", "/") else url


class SandboxFusionClient:
    """`run_code(request)` against one SandboxFusion endpoint, at most `max_concurrent` requests in flight."""

    def __init__(self, url: str, max_concurrent: int = 64, max_attempts: int = 3, retry_delay_seconds: float = 1.0,
                 api_timeout_seconds: float = 10.0) -> None:
        self.url = run_code_url(url)
        self.max_attempts, self.retry_delay, self.api_timeout = max_attempts, retry_delay_seconds, api_timeout_seconds
        self._slots = threading.BoundedSemaphore(max_concurrent)

    def run_code(self, request: RunCodeRequest) -> RunCodeResponse:
        body = json.dumps(asdict(request)).encode()
        timeout = request.compile_timeout + request.run_timeout + self.api_timeout
        last_error = ""
        for attempt in range(1, self.max_attempts + 1):
            with self._slots:
                outcome = self._post(body, timeout)
            if isinstance(outcome, RunCodeResponse):
                return outcome
            retry, last_error = outcome
            if not retry or attempt == self.max_attempts:
                break
            time.sleep(self.retry_delay * attempt)
        raise SandboxFusionError(f"SandboxFusion at {self.url} failed after {attempt} attempt(s): {last_error}. Check "
                                 "that the service is up (reward_model.sandbox_fusion.url), or unset the url to run "
                                 "code in hybridrl's local sandbox")

    async def run_code_async(self, request: RunCodeRequest) -> RunCodeResponse:
        return await asyncio.to_thread(self.run_code, request)

    def _post(self, body: bytes, timeout: float) -> RunCodeResponse | tuple[bool, str]:
        """The response, or (retry?, why it failed)."""
        http_request = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(http_request, timeout=timeout) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as error:
            detail = error.read()[:300].decode(errors="replace")
            return error.code in RETRY_STATUSES, f"HTTP {error.code} {error.reason}: {detail}"
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            reason = getattr(error, "reason", error)
            retry = isinstance(reason, (ConnectionRefusedError, ConnectionResetError))  # a timeout ran the code once
            return retry, f"{type(reason).__name__}: {reason}"
        except json.JSONDecodeError as error:
            return False, f"the answer is not JSON ({error})"
        return RunCodeResponse.from_json(payload)
