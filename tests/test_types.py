"""The type checker over the packages the trainer, its roles and their groups live in, and the run plan
(pyproject's [tool.mypy] `files`).

`cfg: HybridRLConfig` on every function taking the config, the run plan and the role interfaces make a
misspelt key, a role method one path lacks, or a None role called as if present, a test failure here
instead of an AttributeError in step 40 of somebody's run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_trainer_and_workers_type_check():
    pytest.importorskip("mypy", reason="mypy is a test dependency: pip install 'hybridrl[test]'")
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"mypy found problems (run `python -m mypy` at the repository root):\n{done.stdout}" \
                                 f"{done.stderr}"
