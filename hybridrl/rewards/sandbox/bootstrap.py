"""The first process inside a sandbox: confine, start the program, wait for it, report how it ended.

Run as `python -I bootstrap.py <spec-json>` (stdlib only, so it runs before any limit bites). With a
PID namespace it is the namespace's init (pid 1): when it exits, the kernel kills every process left in
the namespace, so a program's background children and fork bombs end with it. The program itself runs
as a forked child (not as pid 1, whose default signal actions are ignored), with its resource limits,
its own uid where the parent ran as root, and no copy of the status pipe, so it cannot forge the report.

The report (one JSON line on the status fd): {"exit_code": int|null, "signal": int|null, "cpu_seconds": float}.
"""

import json
import math
import os
import resource
import signal
import sys

_LIMITS = {  # spec key -> rlimit; soft and hard are set equal unless noted
    "as_bytes": resource.RLIMIT_AS,
    "nproc": resource.RLIMIT_NPROC,
    "fsize_bytes": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
}


def _confine(spec: dict) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    cpu = spec.get("cpu_seconds")
    if cpu:
        # SIGXCPU at the soft limit; SIGKILL one second later for a program that catches SIGXCPU.
        resource.setrlimit(resource.RLIMIT_CPU, (int(cpu), int(cpu) + 1))
    for key, limit in _LIMITS.items():
        value = spec.get(key)
        if value:
            resource.setrlimit(limit, (int(value), int(value)))
    uid = spec.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setgid(spec["gid"])
        os.setuid(uid)


def _start(spec: dict, status_fd: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        os.close(status_fd)
        _confine(spec)
        os.execve(spec["argv"][0], spec["argv"], spec["env"])
    except BaseException as error:  # noqa: BLE001 - the child must never return into the bootstrap
        os.write(2, f"sandbox: could not start {spec['argv'][0]}: {type(error).__name__}: {error}\n".encode())
    os._exit(127)


def main() -> None:
    spec = json.loads(sys.argv[1])
    status_fd = spec["status_fd"]
    if spec.get("cgroup_procs"):
        # Join the run's pids cgroup before forking, so the program and all its children count against it.
        with open(spec["cgroup_procs"], "w") as procs:
            procs.write("0")
    pid = _start(spec, status_fd)
    # Backstop for a caller that died mid-run (it enforces the wall clock itself): kill the program a little
    # after the caller would have, so nothing outlives an orphaned run.
    signal.signal(signal.SIGALRM, lambda *_: os.kill(pid, signal.SIGKILL))
    signal.alarm(max(1, math.ceil(spec["backstop_seconds"])))
    while True:  # as pid 1 this also reaps orphans; it returns when the program itself has ended
        try:
            done, status, usage = os.wait4(-1, 0)
        except ChildProcessError:
            return
        if done == pid:
            break
    report = {
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
    }
    os.write(status_fd, (json.dumps(report) + "\n").encode())


if __name__ == "__main__":
    main()
