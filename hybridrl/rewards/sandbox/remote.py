"""One interface for running code whether the local sandbox or a SandboxFusion service does it:
`make_sandbox(sandbox_fusion_url)` returns a `CodeSandbox` whose `run` / `run_async` answer a
`SandboxResult` (for the agent loop's code tool and other callers that do not care where code runs)."""

from __future__ import annotations

import asyncio
from typing import Protocol

from hybridrl.rewards.sandbox.fusion import RunCodeRequest, RunCodeResponse, SandboxFusionClient, SandboxFusionError
from hybridrl.rewards.sandbox.local import LocalSandbox
from hybridrl.rewards.sandbox.records import (ERROR, OK, SANDBOX_ERROR, TIMEOUT, Isolation, SandboxLimits,
                                              SandboxResult)


class CodeSandbox(Protocol):
    isolation: Isolation

    def run(self, code: str, stdin: str = "", language: str = "python",
            limits: SandboxLimits | None = None) -> SandboxResult: ...

    async def run_async(self, code: str, stdin: str = "", language: str = "python",
                        limits: SandboxLimits | None = None) -> SandboxResult: ...


class FusionSandbox:
    """A SandboxFusion endpoint behind the local sandbox's interface (wall_seconds -> run_timeout,
    memory_mb -> memory_limit_MB; the other limits are the service's own)."""

    def __init__(self, url: str, limits: SandboxLimits = SandboxLimits(), max_concurrent: int = 64) -> None:
        self.client = SandboxFusionClient(url, max_concurrent=max_concurrent)
        self.limits = limits
        self.isolation = Isolation(False, False, False, False, remote=self.client.url)

    def run(self, code: str, stdin: str = "", language: str = "python",
            limits: SandboxLimits | None = None) -> SandboxResult:
        limits = limits or self.limits
        request = RunCodeRequest(code, language, run_timeout=limits.wall_seconds, stdin=stdin,
                                 memory_limit_MB=limits.memory_mb or -1)
        try:
            response = self.client.run_code(request)
        except SandboxFusionError as error:
            return self._result(SANDBOX_ERROR, None, "", str(error), 0.0, limits)
        return self._from_response(response, limits)

    async def run_async(self, code: str, stdin: str = "", language: str = "python",
                        limits: SandboxLimits | None = None) -> SandboxResult:
        return await asyncio.to_thread(self.run, code, stdin, language, limits)

    def _from_response(self, response: RunCodeResponse, limits: SandboxLimits) -> SandboxResult:
        run, compiled = response.run_result, response.compile_result
        failed_compile = compiled is not None and (compiled.status != "Finished" or compiled.return_code != 0)
        if response.status == "SandboxError" or (run is None and not failed_compile):
            return self._result(SANDBOX_ERROR, None, "", response.message, 0.0, limits)
        if failed_compile:
            return self._result(ERROR, compiled.return_code, compiled.stdout or "", compiled.stderr or "",
                                compiled.execution_time or 0.0, limits)
        status = TIMEOUT if run.status == "TimeLimitExceeded" else OK if run.return_code == 0 else ERROR
        return self._result(status, run.return_code, run.stdout or "", run.stderr or "", run.execution_time or 0.0,
                            limits)

    def _result(self, status: str, exit_code: int | None, stdout: str, stderr: str, wall: float,
                limits: SandboxLimits) -> SandboxResult:
        cap = limits.max_output_bytes
        return SandboxResult(status=status, exit_code=exit_code, signal=None, stdout=stdout[:cap], stderr=stderr[:cap],
                             wall_seconds=wall, cpu_seconds=None, isolation=self.isolation,
                             stdout_bytes=len(stdout.encode()), stderr_bytes=len(stderr.encode()),
                             output_cap_bytes=cap)


def make_sandbox(sandbox_fusion_url: str | None = None, limits: SandboxLimits = SandboxLimits(),
                 max_concurrent: int = 4) -> CodeSandbox:
    """SandboxFusion when a url is given, else the local sandbox."""
    if sandbox_fusion_url:
        return FusionSandbox(sandbox_fusion_url, limits, max_concurrent)
    return LocalSandbox(limits, max_concurrent)
