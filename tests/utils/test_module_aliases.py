"""verl's module names resolve to hybridrl's while a user file written against verl is imported, and only then."""

from __future__ import annotations

import importlib
import sys

import pytest

from hybridrl.utils.module_aliases import verl_installed, verl_module_aliases


def test_aliases_and_their_parent_packages_exist_only_inside_the_context():
    if verl_installed():
        pytest.skip("a real verl is installed: the aliases leave it alone")
    aliases = {"verl.tools.base_tool": "hybridrl.rollout.tools.base", "verl.utils.rollout_trace": "hybridrl.rollout.trace"}
    with verl_module_aliases(aliases):
        assert importlib.import_module("verl.tools.base_tool") is importlib.import_module("hybridrl.rollout.tools.base")
        from verl.utils.rollout_trace import rollout_trace_op  # noqa: F401 (the name a verl file imports)
        assert {"verl", "verl.tools", "verl.utils"} <= set(sys.modules)
    assert not [name for name in sys.modules if name == "verl" or name.startswith("verl.")]
    assert not verl_installed()
