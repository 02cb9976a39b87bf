"""A user's Python file executed as a module: reward functions, dataset classes, function tools, external modules."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


class NotPythonSource(ImportError):
    """The file cannot be loaded as Python source (no loader for its name)."""


def exec_file_as_module(module_name: str, path: str | Path) -> ModuleType:
    """Execute the file at `path` as module `module_name`. It is registered in sys.modules before it runs
    (dataclasses and pickling inside the file look it up) and removed again if it raises; the file's own
    exception propagates for the caller to name. NotPythonSource when the file is not Python source."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise NotPythonSource(f"cannot import {str(path)!r} as Python source")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module
