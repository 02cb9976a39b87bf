"""Whether a process exists, by pid: the one check behind stale pid files (checkpoint/startup.py), stale weight
handoff buffers (distributed/weight_handoff.py) and `hybridrl control` (elastic/control.py)."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """True while a process with this pid exists in this pid namespace, whoever owns it. Signal 0 checks without
    sending anything: ProcessLookupError means no such process, PermissionError a live process of another user.
    A pid can be reused after its process ends; callers that must know it is the same process compare its start
    time too (checkpoint/pid_file.py `process_identity`). An exited child not yet reaped still counts as alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
