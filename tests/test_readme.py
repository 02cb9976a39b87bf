"""The README's commands as written: its verl-style training command passes every configuration check."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from hybridrl.config import load_config
from hybridrl.trainer.preflight import preflight

README = Path(__file__).resolve().parents[1] / "README.md"
MODULE = "hybridrl.trainer.main_ppo"


def readme_training_overrides() -> list[str]:
    """The key=value arguments of the README's first `python -m hybridrl.trainer.main_ppo` command."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    command = next(block for block in blocks if f"python -m {MODULE}" in block)
    words = shlex.split(os.path.expandvars(command.replace("\\\n", " ")))
    return words[words.index(MODULE) + 1:]


def test_the_readme_training_command_passes_the_configuration_checks():
    overrides = readme_training_overrides()
    assert "actor_rollout_ref.model.path=/models/Qwen2.5-0.5B-Instruct" in overrides  # the block was found
    cfg = load_config(overrides + ["trainer.device=cpu"])  # the checks themselves, on any machine
    preflight(cfg)
