"""`code_interpreter`: the model's Python runs in a sandbox, and it reads what the program printed (ReTool-style).

The tool YAML is verl's (`verl.tools.sandbox_fusion_tools.SandboxFusionTool`, and verl-recipe ReTool's
`recipe.retool.retool.CustomSandboxFusionTool`, both mapped here), with the same `config` keys:

    tools:
      - class_name: hybridrl.rollout.tools.builtin.code_interpreter.CodeInterpreterTool
        config:
          sandbox_fusion_url: null        # verl's key; unset: hybridrl's local sandbox (a separate process)
          default_timeout: 30             # wall-clock seconds per call (the model's own `timeout` is capped by it)
          default_language: python        # python or bash locally; any SandboxFusion language remotely
          memory_limit_mb: 1024
          num_workers: 10                 # programs running at once in this process
          enable_global_rate_limit: true  # with rate_limit: at most that many at once (verl: across workers)
          rate_limit: 10
          cpu_seconds: null               # hybridrl: CPU-time limit (null: default_timeout), local sandbox only
          retool: false                   # hybridrl: ReTool's input handling (below)
        tool_schema: {type: function, function: {name: code_interpreter, parameters: {..., properties: {code: ...}}}}

Where code runs: the local sandbox gives each call a fresh process with CPU, memory and wall-clock limits and,
where the kernel allows it, no network (its own network namespace); the isolation it really has is logged once.
With `sandbox_fusion_url` the code goes to that SandboxFusion service (`POST /run_code`; a local stand-in:
`python -m hybridrl.rewards.sandbox.server`), whose isolation is the service's.

What the model reads, as verl's tool: stdout followed by stderr (a traceback included) when the program ran; a
line saying so when it ran out of time, CPU or memory. A sandbox that cannot run anything (service down) is a tool
error (`agent_loop/tool_errors/exception`), not an empty answer (verl answers "no stdout here"). `retool: true`
(the ReTool class sets it): the code of a ```python fenced block is taken when the model wrote one, and the last
line is wrapped in print() unless it prints already, as verl-recipe's CustomSandboxFusionTool does.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from hybridrl.rewards.sandbox import SandboxLimits, SandboxResult, make_sandbox
from hybridrl.rewards.sandbox.records import CPU_LIMIT, MEMORY_LIMIT, SANDBOX_ERROR, TIMEOUT
from hybridrl.rollout.tools.base import BaseTool
from hybridrl.rollout.tools.schema import ToolResponse, ToolSchema

logger = logging.getLogger("hybridrl.rollout.tools")

DEFAULT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "A tool for executing code.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "The code to execute."}},
                       "required": ["code"]},
    },
}
_FENCED = re.compile(r"```python(.*?)```", re.DOTALL)


class CodeInterpreterTool(BaseTool):
    def __init__(self, config: dict | None = None, tool_schema: ToolSchema | dict | None = None):
        super().__init__(config or {}, tool_schema or DEFAULT_SCHEMA)
        cfg = self.config
        self.default_timeout = _positive(cfg, "default_timeout", 30.0)
        self.default_language = str(cfg.get("default_language", "python"))
        self.retool = bool(cfg.get("retool", False))
        workers = int(_positive(cfg, "num_workers", 10))
        if cfg.get("enable_global_rate_limit", True):
            workers = min(workers, int(_positive(cfg, "rate_limit", 10)))
        memory = cfg.get("memory_limit_mb", 1024)
        cpu = cfg.get("cpu_seconds")
        self.limits = SandboxLimits(wall_seconds=self.default_timeout,
                                    cpu_seconds=float(cpu) if cpu else self.default_timeout,
                                    memory_mb=int(memory) if memory else None)
        self.url = cfg.get("sandbox_fusion_url") or None
        self.sandbox = make_sandbox(self.url, self.limits, max_concurrent=workers)
        logger.info("tool %s runs code %s", self.name, self.sandbox.isolation.describe())

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        code = parameters.get("code", "")
        code = code if isinstance(code, str) else str(code)
        if self.retool:
            code = retool_code(code)
        language = str(parameters.get("language") or self.default_language)
        limits = self._limits(parameters.get("timeout"))
        result = await self.sandbox.run_async(code, language=language, limits=limits)
        if result.status == SANDBOX_ERROR:
            where = f"the SandboxFusion service at {self.url}" if self.url else "the local sandbox"
            raise RuntimeError(f"{where} could not run the code: {result.stderr.strip()[-300:]}")
        metrics = {"status": result.status, "wall_seconds": result.wall_seconds}
        return ToolResponse(text=program_output(result)), 0.0, metrics

    def _limits(self, requested: Any) -> SandboxLimits:
        """The config's limits, with a shorter wall clock when the model asks for one (never a longer one)."""
        try:
            seconds = float(requested)
        except (TypeError, ValueError):
            return self.limits
        if not 0 < seconds < self.limits.wall_seconds:
            return self.limits
        cpu = min(self.limits.cpu_seconds, seconds) if self.limits.cpu_seconds else None
        return SandboxLimits(wall_seconds=seconds, cpu_seconds=cpu, memory_mb=self.limits.memory_mb)


class RetoolCodeInterpreterTool(CodeInterpreterTool):
    """verl-recipe ReTool's `CustomSandboxFusionTool`: `retool: true` by default."""

    def __init__(self, config: dict | None = None, tool_schema: ToolSchema | dict | None = None):
        super().__init__({"retool": True, **(config or {})}, tool_schema)


def program_output(result: SandboxResult) -> str:
    """What the model reads of a run: stdout then stderr, and a line when a limit stopped the program."""
    output = result.stdout + result.stderr
    stopped = {TIMEOUT: f"Execution timed out after {result.wall_seconds:.1f} s",
               CPU_LIMIT: "Execution stopped: CPU time limit exceeded",
               MEMORY_LIMIT: "Execution stopped: memory limit exceeded"}.get(result.status)
    if stopped:
        output = f"{output}\n{stopped}" if output.strip() else stopped
    return output


def retool_code(code: str) -> str:
    """ReTool's input handling: the first ```python block when there is one; the last non-empty line printed."""
    fenced = _FENCED.findall(code)
    if fenced:
        code = fenced[0].strip()
    lines = code.split("\n")
    for index in range(len(lines) - 1, -1, -1):
        if lines[index] == "":
            continue
        if not lines[index].startswith("print"):
            lines[index] = f"print({lines[index]})"
        break
    return "\n".join(lines)


def _positive(config: dict, key: str, default: float) -> float:
    value = config.get(key, default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if number <= 0:
        raise ValueError(f"code_interpreter tool config: {key}={value!r} must be a positive number")
    return number
