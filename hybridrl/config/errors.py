"""The one exception type every user-reachable configuration problem raises."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem; the message names the key(s), the value(s), the rule and a fix."""
