"""Running untrusted code: a local sandbox (separate confined process) and a SandboxFusion HTTP client.

Both reward scorers (code data sources) and the agent loop's code tool use these.
"""

from hybridrl.rewards.sandbox.local import LocalSandbox, SandboxError, SandboxSetup, sandbox_setup
from hybridrl.rewards.sandbox.records import Isolation, SandboxLimits, SandboxResult

__all__ = ["Isolation", "LocalSandbox", "SandboxError", "SandboxLimits", "SandboxResult", "SandboxSetup",
           "sandbox_setup"]
