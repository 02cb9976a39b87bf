"""Run untrusted code in a separate, confined process (the local sandbox).

Each run gets a fresh temporary working directory holding the program and its stdin, a minimal
environment, the limits of `SandboxLimits`, and, where the kernel allows it, its own network namespace
(no network at all) and PID namespace (every process of the run dies with it), entered with util-linux
`unshare`. Run as root, the program also drops to an unprivileged uid (nobody), which makes the process
limit bite and keeps it out of root's files. `LocalSandbox.isolation` says which of these walls a run
really has; nothing is claimed that was not set up.

The wall clock is enforced from outside: SIGTERM to the run's process group, then SIGKILL after
`kill_grace_seconds`. Runs are concurrency-limited by a semaphore, and `run_async` makes the sandbox
usable from asyncio (the blocking run happens on a worker thread).
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from hybridrl.rewards.sandbox.cgroups import PidsCgroup, pids_cgroup_root

from hybridrl.rewards.sandbox.records import (CPU_LIMIT, ERROR, KILLED, MEMORY_LIMIT, OK, SANDBOX_ERROR, TIMEOUT,
                                              Isolation, SandboxLimits, SandboxResult)

BOOTSTRAP = str(Path(__file__).with_name("bootstrap.py"))
NOBODY = 65534
# language -> (file name, argv after the interpreter path); the interpreter is resolved at run time
LANGUAGES = {"python": ("main.py", ["main.py"]), "bash": ("main.sh", ["main.sh"])}
_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


class SandboxError(RuntimeError):
    """The sandbox itself could not be used (bad request, unsupported language)."""


@dataclass(frozen=True)
class SandboxSetup:
    """How runs are confined on this machine: probed once per interpreter (`sandbox_setup`)."""

    prefix: tuple[str, ...]  # `unshare ...` entering new network + PID namespaces, or ()
    drop_user: bool  # run the program as nobody
    cgroup_root: Path | None  # where per-run pids cgroups go when the program cannot drop to nobody
    isolation: Isolation


_probe_lock = threading.Lock()
_setups: dict[tuple, SandboxSetup] = {}


def sandbox_setup(python: str = sys.executable, isolate: bool = True) -> SandboxSetup:
    """Probe (once) which walls this machine allows: namespaces, a separate uid, a pids cgroup."""
    key = (os.geteuid(), python, isolate)
    with _probe_lock:
        if key not in _setups:
            _setups[key] = _probe(python, isolate)
        return _setups[key]


def _probe(python: str, isolate: bool) -> SandboxSetup:
    as_root = os.geteuid() == 0
    prefix, missing = _namespace_prefix(as_root) if isolate else ((), ["network: isolation switched off"])
    drop_user = as_root and _runs_as_nobody(python)
    cgroup_root = pids_cgroup_root() if as_root and not drop_user else None
    if not drop_user:
        missing.append("runs as the calling user" + (" (root: its interpreter is not reachable by nobody)" if as_root
                                                      else "") + ": the program can read and write what that user can")
    if not drop_user and cgroup_root is None:
        missing.append("max_processes is not enforced (no separate uid and no writable pids cgroup)")
    if not prefix:
        missing.append("processes: a child that leaves the run's process group outlives the run")
    isolation = Isolation(network_namespace=bool(prefix), pid_namespace=bool(prefix), separate_user=drop_user,
                          process_limit=drop_user or cgroup_root is not None, missing=tuple(missing))
    return SandboxSetup(prefix, drop_user, cgroup_root, isolation)


def _namespace_prefix(as_root: bool) -> tuple[tuple[str, ...], list[str]]:
    unshare = shutil.which("unshare")
    if unshare is None:
        return (), ["network: `unshare` (util-linux) is not installed, so the program has the host's network"]
    prefix = (unshare, *(() if as_root else ("--user", "--map-root-user")), "--net", "--pid", "--fork", "--kill-child")
    try:
        works = subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        works = False
    if not works:
        return (), ["network: this kernel or container refuses new namespaces (`unshare --net` failed), so the "
                    "program has the host's network"]
    return prefix, []


def _runs_as_nobody(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "pass"], user=NOBODY, group=NOBODY, extra_groups=[], cwd="/",
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


class LocalSandbox:
    """Runs code under `limits` (per-run overrides allowed); at most `max_concurrent` runs at once."""

    def __init__(self, limits: SandboxLimits = SandboxLimits(), max_concurrent: int = 4,
                 python: str = sys.executable, isolate: bool = True) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
        self.limits, self.python = limits, python
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self.setup = sandbox_setup(python, isolate)
        self.isolation = self.setup.isolation

    def run(self, code: str, stdin: str | bytes = "", language: str = "python", limits: SandboxLimits | None = None,
            files: dict[str, bytes] | None = None, fetch_files: tuple[str, ...] = ()) -> SandboxResult:
        """Run `code` with `stdin`; `files` are written beside it first, `fetch_files` read back after."""
        if language not in LANGUAGES:
            raise SandboxError(f"language {language!r} is not supported by the local sandbox; use one of "
                               f"{sorted(LANGUAGES)}")
        with self._slots:
            workdir = Path(tempfile.mkdtemp(prefix="hybridrl-sandbox-"))
            try:
                return self._run_in(workdir, code, stdin, language, limits or self.limits, files or {}, fetch_files)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)

    async def run_async(self, code: str, stdin: str | bytes = "", language: str = "python",
                        limits: SandboxLimits | None = None, files: dict[str, bytes] | None = None,
                        fetch_files: tuple[str, ...] = ()) -> SandboxResult:
        """`run` on a worker thread, so an event loop keeps going while the code runs."""
        return await asyncio.to_thread(self.run, code, stdin, language, limits, files, fetch_files)

    # ------------------------------------------------------------ one run
    def _run_in(self, workdir: Path, code: str, stdin: str | bytes, language: str, limits: SandboxLimits,
                files: dict[str, bytes], fetch_files: tuple[str, ...]) -> SandboxResult:
        program, argv_tail = LANGUAGES[language]
        _write_inputs(workdir, {program: code.encode(), **files}, stdin)
        if self.setup.drop_user:
            _chown_tree(workdir, NOBODY)
        cgroup = (PidsCgroup(self.setup.cgroup_root, limits.max_processes)
                  if self.setup.cgroup_root is not None and limits.max_processes else None)
        status_read, status_write = os.pipe()
        spec = _bootstrap_spec(self._interpreter(language) + argv_tail, workdir, limits, status_write,
                               self.setup.drop_user, cgroup.procs_file if cgroup else None)
        start = time.monotonic()
        try:
            with open(workdir / ".stdin", "rb") as stdin_file:
                process = subprocess.Popen([*self.setup.prefix, sys.executable, "-I", BOOTSTRAP, json.dumps(spec)],
                                           stdin=stdin_file, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           cwd=workdir, env=spec["env"], start_new_session=True,
                                           pass_fds=(status_write,))
        finally:
            os.close(status_write)
        reader = _OutputReader(process, limits.max_output_bytes)
        try:
            closed = reader.read_until(start + limits.wall_seconds)
            timed_out = not closed and process.poll() is None
            _stop_group(process, limits.kill_grace_seconds if timed_out else 0.0)
            # The pipes close when the last process holding them is gone: return only after that.
            reader.read_until(time.monotonic() + 5.0, drain_after_exit=None)
            streams = reader.buffers
            report = _read_report(status_read)
        finally:
            reader.close()
            os.close(status_read)
            if cgroup is not None:
                cgroup.remove()
        result = _result(report, timed_out, streams, time.monotonic() - start, limits, self.isolation)
        result.files = {name: (workdir / name).read_bytes() for name in fetch_files if (workdir / name).is_file()}
        return result

    def _interpreter(self, language: str) -> list[str]:
        return [self.python] if language == "python" else [shutil.which("bash") or "/bin/bash"]


def _write_inputs(workdir: Path, files: dict[str, bytes], stdin: str | bytes) -> None:
    for name, content in files.items():
        path = (workdir / name).resolve()
        if workdir.resolve() not in path.parents:
            raise SandboxError(f"file name {name!r} leaves the sandbox's working directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else str(content).encode())
    (workdir / ".stdin").write_bytes(stdin.encode() if isinstance(stdin, str) else stdin)


def _chown_tree(root: Path, uid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.chown(path, uid, uid)


def _bootstrap_spec(argv: list[str], workdir: Path, limits: SandboxLimits, status_fd: int, drop_user: bool,
                    cgroup_procs: str | None) -> dict:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir), "LANG": "C.UTF-8", "TMPDIR": str(workdir),
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8", **{name: "1" for name in _THREAD_ENV}}
    backstop = limits.wall_seconds + limits.kill_grace_seconds + 2
    return {"argv": argv, "env": env, "status_fd": status_fd, "backstop_seconds": backstop,
            "cpu_seconds": limits.cpu_seconds, "as_bytes": (limits.memory_mb or 0) * (1 << 20),
            "nproc": limits.max_processes if drop_user else None, "fsize_bytes": (limits.max_file_mb or 0) * (1 << 20),
            "nofile": 256, "uid": NOBODY if drop_user else None, "gid": NOBODY, "cgroup_procs": cgroup_procs}


class _CappedBuffer:
    def __init__(self, cap: int) -> None:
        self.cap, self.total, self.chunks = cap, 0, []

    def add(self, data: bytes) -> None:
        room = self.cap - sum(len(chunk) for chunk in self.chunks) if self.total < self.cap else 0
        if room > 0:
            self.chunks.append(data[:room])
        self.total += len(data)

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


class _OutputReader:
    """Reads a run's stdout/stderr, keeping `cap` bytes of each; output past the cap is still read (and
    dropped), so a chatty program never blocks on a full pipe."""

    def __init__(self, process: subprocess.Popen, cap: int) -> None:
        self.process = process
        self.buffers = {"stdout": _CappedBuffer(cap), "stderr": _CappedBuffer(cap)}
        self.selector = selectors.DefaultSelector()
        self.selector.register(process.stdout, selectors.EVENT_READ, "stdout")
        self.selector.register(process.stderr, selectors.EVENT_READ, "stderr")

    def read_until(self, deadline: float, drain_after_exit: float | None = 0.5) -> bool:
        """Read until both pipes close (True), `deadline` passes, or the first process has been gone for
        `drain_after_exit` s (a leftover child may hold the pipes open) (False)."""
        exited_at = None
        while self.selector.get_map():
            now = time.monotonic()
            if exited_at is None and drain_after_exit is not None and self.process.poll() is not None:
                exited_at = now
            if now >= deadline or (exited_at is not None and now - exited_at > drain_after_exit):
                return False
            for key, _ in self.selector.select(timeout=min(0.1, deadline - now)):
                data = os.read(key.fileobj.fileno(), 1 << 16)
                if data:
                    self.buffers[key.data].add(data)
                else:
                    self.selector.unregister(key.fileobj)
        return True

    def close(self) -> None:
        self.selector.close()
        self.process.stdout.close()
        self.process.stderr.close()


def _stop_group(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM the run's process group, SIGKILL it after `grace` (at once with 0), and reap the leader."""
    if grace > 0:
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(process.pid, signal.SIGKILL)  # also ends children left behind by a finished program
    process.wait()


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _read_report(status_fd: int) -> dict | None:
    os.set_blocking(status_fd, False)
    try:
        line = os.read(status_fd, 4096)
    except BlockingIOError:
        return None
    try:
        return json.loads(line) if line else None
    except json.JSONDecodeError:
        return None


def _result(report: dict | None, timed_out: bool, streams: dict[str, _CappedBuffer], wall: float,
            limits: SandboxLimits, isolation: Isolation) -> SandboxResult:
    stderr = streams["stderr"].text()
    exit_code = report["exit_code"] if report else None
    signum = report["signal"] if report else None
    cpu = report["cpu_seconds"] if report else None
    if timed_out:
        status = TIMEOUT
    elif report is None:
        status = SANDBOX_ERROR
    else:
        status = _status(exit_code, signum, cpu, stderr, limits)
    return SandboxResult(status=status, exit_code=exit_code, signal=signum, stdout=streams["stdout"].text(),
                         stderr=stderr, wall_seconds=wall, cpu_seconds=cpu, isolation=isolation,
                         stdout_bytes=streams["stdout"].total, stderr_bytes=streams["stderr"].total,
                         output_cap_bytes=limits.max_output_bytes)


def _status(exit_code: int | None, signum: int | None, cpu: float, stderr: str, limits: SandboxLimits) -> str:
    if signum == signal.SIGXCPU or (signum == signal.SIGKILL and limits.cpu_seconds
                                    and cpu >= limits.cpu_seconds):
        return CPU_LIMIT
    if signum is not None:
        return KILLED
    if exit_code == 0:
        return OK
    # RLIMIT_AS makes allocation fail inside the program; Python reports it as MemoryError.
    return MEMORY_LIMIT if limits.memory_mb and "MemoryError" in stderr[-2000:] else ERROR


def with_limits(limits: SandboxLimits, **changes) -> SandboxLimits:
    """`limits` with some fields changed (a readable alias of dataclasses.replace)."""
    return replace(limits, **changes)


__all__ = ["LocalSandbox", "SandboxError", "SandboxSetup", "sandbox_setup", "with_limits", "OK", "ERROR", "TIMEOUT", "CPU_LIMIT",
           "MEMORY_LIMIT", "KILLED", "SANDBOX_ERROR"]
