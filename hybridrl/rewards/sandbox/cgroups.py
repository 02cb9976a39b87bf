"""A per-run pids cgroup: the process limit for a sandbox that cannot run as its own uid.

RLIMIT_NPROC counts processes per real uid and never applies to root, so a program that must run as
root (its interpreter lies under a directory only root can enter, e.g. a pyenv in /root) is held to
`max_processes` by a pids cgroup instead: cgroup v1's `pids` hierarchy, or a cgroup v2 directory whose
parent already delegates the `pids` controller. Where neither is writable, `pids_cgroup_root()` is None
and the sandbox says that the process limit is missing.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

_V1 = Path("/sys/fs/cgroup/pids")


def pids_cgroup_root() -> Path | None:
    """A writable cgroup directory under which per-run pids cgroups can be made, or None."""
    for line in _own_cgroups():
        hierarchy, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(",") and _V1.is_dir():
            return _writable(_V1 / path.lstrip("/"))
        if hierarchy == "0":
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            subtree = base / "cgroup.subtree_control"
            if subtree.is_file() and "pids" in subtree.read_text().split():
                return _writable(base)
    return None


def _own_cgroups() -> list[str]:
    try:
        return Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []


def _writable(path: Path) -> Path | None:
    return path if path.is_dir() and os.access(path, os.W_OK) else None


class PidsCgroup:
    """One run's cgroup: `procs_file` is where the bootstrap writes its pid; `remove()` deletes it."""

    def __init__(self, root: Path, max_processes: int) -> None:
        self.path = root / f"hybridrl-sandbox-{uuid.uuid4().hex[:12]}"
        self.path.mkdir()
        (self.path / "pids.max").write_text(str(max_processes))
        self.procs_file = str(self.path / "cgroup.procs")

    def remove(self) -> None:
        """rmdir the cgroup (it is empty once the run's processes are gone)."""
        try:
            self.path.rmdir()
        except OSError:
            pass
