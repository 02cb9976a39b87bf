"""What a sandboxed run is allowed (SandboxLimits), how it was isolated (Isolation) and how it ended
(SandboxResult)."""

from __future__ import annotations

from dataclasses import dataclass, field

# SandboxResult.status values
OK, ERROR, TIMEOUT, CPU_LIMIT, MEMORY_LIMIT, KILLED, SANDBOX_ERROR = (
    "ok", "error", "timeout", "cpu_limit", "memory_limit", "killed", "sandbox_error")


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. 0 or None switches a limit off (the wall clock cannot be switched off)."""

    wall_seconds: float = 10.0  # from start to kill, including interpreter start-up
    cpu_seconds: float | None = 10.0  # RLIMIT_CPU of the program (SIGXCPU, then SIGKILL 1 s later)
    memory_mb: int | None = 1024  # RLIMIT_AS: address space, so a MemoryError rather than the OOM killer
    max_processes: int | None = 64  # RLIMIT_NPROC; only enforced when the program runs as its own uid
    max_file_mb: int | None = 64  # RLIMIT_FSIZE: the largest file the program may write
    max_output_bytes: int = 1 << 20  # kept per stream (stdout, stderr); the rest is counted and dropped
    kill_grace_seconds: float = 0.5  # between SIGTERM and SIGKILL at the wall clock

    def __post_init__(self) -> None:
        if not self.wall_seconds or self.wall_seconds <= 0:
            raise ValueError(f"SandboxLimits.wall_seconds must be positive, got {self.wall_seconds}")
        if self.max_output_bytes < 0:
            raise ValueError(f"SandboxLimits.max_output_bytes must be >= 0, got {self.max_output_bytes}")


@dataclass(frozen=True)
class Isolation:
    """Which walls a run had. `missing` lists, in words, what it did not have."""

    network_namespace: bool  # an empty network namespace: no interface but a down loopback
    pid_namespace: bool  # the program's processes all die with it
    separate_user: bool  # ran as an unprivileged uid (cannot touch root's files)
    process_limit: bool  # max_processes is enforced (RLIMIT_NPROC of its own uid, or a pids cgroup)
    missing: tuple[str, ...] = ()
    remote: str | None = None  # the SandboxFusion endpoint that ran the code (its isolation is the service's)

    def describe(self) -> str:
        if self.remote:
            return f"ran by the SandboxFusion service at {self.remote} (isolation is that service's)"
        walls = [name for name, on in (("no network (own network namespace)", self.network_namespace),
                                       ("own PID namespace", self.pid_namespace),
                                       ("unprivileged uid", self.separate_user),
                                       ("process limit", self.process_limit)) if on]
        text = "; ".join(walls) or "resource limits only"
        return text + (f". NOT isolated: {'; '.join(self.missing)}" if self.missing else "")


@dataclass
class SandboxResult:
    """How one run ended. `status`: ok | error (non-zero exit) | timeout (wall clock) | cpu_limit |
    memory_limit | killed (another signal) | sandbox_error (the sandbox could not run it)."""

    status: str
    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    wall_seconds: float
    cpu_seconds: float | None
    isolation: Isolation
    stdout_bytes: int = 0  # produced, before the cap
    stderr_bytes: int = 0
    output_cap_bytes: int = 0
    files: dict[str, bytes] = field(default_factory=dict)  # fetched after the run (fetch_files)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def stdout_truncated(self) -> bool:
        return self.stdout_bytes > self.output_cap_bytes

    @property
    def stderr_truncated(self) -> bool:
        return self.stderr_bytes > self.output_cap_bytes

    def summary(self) -> str:
        """One line for logs and tool responses: status, exit, times, truncation."""
        parts = [self.status]
        if self.exit_code is not None:
            parts.append(f"exit {self.exit_code}")
        if self.signal is not None:
            parts.append(f"signal {self.signal}")
        parts.append(f"{self.wall_seconds:.2f}s wall")
        for name, produced in (("stdout", self.stdout_bytes), ("stderr", self.stderr_bytes)):
            if produced > self.output_cap_bytes:
                parts.append(f"{name} truncated to {self.output_cap_bytes} of {produced} bytes")
        return ", ".join(parts)
