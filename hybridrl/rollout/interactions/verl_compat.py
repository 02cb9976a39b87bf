"""verl's module names for interaction files written against verl, while such a file is imported (only when
verl itself is not installed; a real verl is left alone): `verl.interactions.base` is hybridrl's
BaseInteraction and `verl.utils.rollout_trace` hybridrl's tracing (`rollout_trace_op`)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from typing import Iterator

VERL_INTERACTION_MODULES: dict[str, str] = {
    "verl.interactions.base": "hybridrl.rollout.interactions.base",
    "verl.interactions.gsm8k_interaction": "hybridrl.rollout.interactions.gsm8k",
    "verl.utils.rollout_trace": "hybridrl.rollout.trace",
}
_PACKAGES = ("verl", "verl.interactions", "verl.utils")


@contextlib.contextmanager
def verl_interaction_modules() -> Iterator[None]:
    if "verl" in sys.modules or importlib.util.find_spec("verl") is not None:
        yield
        return
    added: dict[str, types.ModuleType] = {}
    for name in _PACKAGES:
        package = types.ModuleType(name)
        package.__path__ = []  # a package, so `import verl.interactions.base` finds the module registered below
        added[name] = package
    for verl_name, ours in VERL_INTERACTION_MODULES.items():
        added[verl_name] = importlib.import_module(ours)
    sys.modules.update(added)
    try:
        yield
    finally:
        for name, module in added.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
