"""Shared by the fault tests: tiny CPU runs (the trainer tests' arithmetic task and model)."""

from __future__ import annotations

import pytest

from tests.trainer.helpers import tiny_run_overrides


@pytest.fixture(scope="session")
def overrides_for(arith_model_dir, arithmetic_files):
    """`overrides_for(out_dir, steps=..., extra=[...])`: a tiny GRPO run on CPU into `out_dir`."""

    def make(out_dir: str, steps: int = 4, extra: list[str] | tuple[str, ...] = ()) -> list[str]:
        return tiny_run_overrides(arith_model_dir, arithmetic_files, str(out_dir), steps=steps, extra=list(extra))

    return make


@pytest.fixture(autouse=True, scope="module")
def _nothing_left_in_the_temp_dir():
    """The before/after listing of the temp directory: no rank-log folder of this process or of a child the
    fault tests started may outlive a test module."""
    import os
    import shutil

    from hybridrl.checkpoint.startup import RANK_LOGS, rank_log_folders
    from tests.faults import runs

    before = set(rank_log_folders())
    yield
    ours = {os.getpid()} | runs.STARTED
    left = [f for f in set(rank_log_folders()) - before
            if int(RANK_LOGS.match(os.path.basename(f)).group("pid")) in ours]
    for folder in left:
        shutil.rmtree(folder, ignore_errors=True)
    assert not left, f"the fault tests left rank-log folders in the temp directory: {left}"
