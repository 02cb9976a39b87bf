"""Running untrusted code: a local sandbox (separate confined process) and a SandboxFusion HTTP client.

Both reward scorers (code data sources) and the agent loop's code tool use these.
"""

from hybridrl.rewards.sandbox.local import LocalSandbox, SandboxError, SandboxSetup, sandbox_setup
from hybridrl.rewards.sandbox.records import Isolation, SandboxLimits, SandboxResult
from hybridrl.rewards.sandbox.remote import CodeSandbox, FusionSandbox, make_sandbox

__all__ = ["CodeSandbox", "FusionSandbox", "Isolation", "LocalSandbox", "SandboxError", "SandboxLimits",
           "SandboxResult", "SandboxSetup", "make_sandbox", "sandbox_setup"]
