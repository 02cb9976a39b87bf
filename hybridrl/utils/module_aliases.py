"""verl's module names for user files written against verl (tool and interaction files): while such a file is
imported, `verl.x.y` resolves to the hybridrl module offering the same names. Only when verl itself is not
installed; a real verl is left alone."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from typing import Iterator


def verl_installed() -> bool:
    return "verl" in sys.modules or importlib.util.find_spec("verl") is not None


@contextlib.contextmanager
def verl_module_aliases(aliases: dict[str, str]) -> Iterator[None]:
    """`aliases`: verl module -> hybridrl module. Their parent packages (`verl`, `verl.tools`, ...) exist as empty
    packages meanwhile; everything added is removed afterwards."""
    if verl_installed():
        yield
        return
    added: dict[str, types.ModuleType] = {}
    for verl_name in aliases:
        parts = verl_name.split(".")
        for end in range(1, len(parts)):
            package = types.ModuleType(".".join(parts[:end]))
            package.__path__ = []  # a package, so `import verl.a.b` finds the module registered below
            added.setdefault(package.__name__, package)
    for verl_name, ours in aliases.items():
        added[verl_name] = importlib.import_module(ours)
    sys.modules.update(added)
    try:
        yield
    finally:
        for name, module in added.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
