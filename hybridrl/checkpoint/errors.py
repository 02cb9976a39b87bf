"""The checkpoint package's one error type (user-facing: the message names the path, the cause and the fix)."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, unsafe, or asked for in a way that cannot work."""
