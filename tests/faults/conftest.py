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
