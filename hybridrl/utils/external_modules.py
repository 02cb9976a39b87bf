"""User modules that register algorithms (verl's `VERL_USE_EXTERNAL_MODULES`).

verl imports the comma-separated modules of `VERL_USE_EXTERNAL_MODULES` at `import verl`, in every
process, so a user's `@register_policy_loss` / `@register_adv_est` run before the config is used. Here
they are imported once per process at the first registry lookup instead (`import hybridrl` stays light);
the environment reaches worker processes too. An entry is a module name (`my_pkg.losses`) or a path to a
.py file (`/work/my_losses.py`).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from hybridrl.utils.python_files import NotPythonSource, exec_file_as_module

ENV_VAR = "VERL_USE_EXTERNAL_MODULES"
_imported: set[str] = set()


def external_module_entries() -> list[str]:
    return [entry.strip() for entry in os.environ.get(ENV_VAR, "").split(",") if entry.strip()]


def import_external_modules() -> None:
    """Import every entry of VERL_USE_EXTERNAL_MODULES not imported yet in this process."""
    for entry in external_module_entries():
        if entry in _imported:
            continue
        if entry.endswith(".py"):
            _import_file(entry)
        else:
            try:
                importlib.import_module(entry)
            except ImportError as error:
                raise ImportError(f"{ENV_VAR} names module {entry!r}, which does not import ({error}); put it on "
                                  "PYTHONPATH or give the path of its .py file") from error
        _imported.add(entry)


def _import_file(entry: str) -> None:
    file = Path(entry).expanduser()
    if not file.is_file():
        raise ImportError(f"{ENV_VAR} names {entry!r}, which is not a file; give a module name or a .py path")
    module_name = f"hybridrl_external_{file.stem}_{abs(hash(str(file.resolve())))}"
    try:
        exec_file_as_module(module_name, file)
    except NotPythonSource as error:
        raise ImportError(f"{ENV_VAR} entry {entry!r} cannot be imported as Python") from error
    except Exception as error:
        raise ImportError(f"importing {file} (from {ENV_VAR}) failed: {type(error).__name__}: {error}") from error
