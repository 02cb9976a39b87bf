"""A user's class loaded from where a verl config names it (`data.custom_cls`, `data.sampler`).

verl's `load_extern_object(path, name)` accepts three spellings of `path`, and so does this loader:
`pkg://package.module` (or `pkg://package/module`), `file://relative/or/absolute.py`, and a plain path to a
.py file (relative paths resolve against the working directory, as verl's scripts run from verl's root).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import sys
from types import ModuleType
from typing import Any

from hybridrl.data.errors import DatasetError
from hybridrl.utils.python_files import NotPythonSource, exec_file_as_module

PKG_PREFIX = "pkg://"
FILE_PREFIX = "file://"


def load_user_class(path: str, name: str | None, *, path_key: str, name_key: str) -> type:
    """The class `name` defined in (or imported by) the module at `path`; errors name both keys and the fix."""
    if not name:
        raise DatasetError(f"{path_key}={path!r} is set but {name_key} is not: set {name_key} to the class name "
                           f"inside {path}")
    module = _import(path, path_key)
    found = getattr(module, name, None)
    if not inspect.isclass(found):
        classes = sorted(n for n, v in vars(module).items() if inspect.isclass(v) and not n.startswith("_"))
        what = "no class" if found is None else f"a {type(found).__name__}, not a class,"
        raise DatasetError(f"{name_key}={name!r}: {path} defines {what} named {name!r}; classes there: "
                           f"{classes or 'none'}")
    return found


def _import(path: str, key: str) -> ModuleType:
    if path.startswith(PKG_PREFIX):
        module_name = path[len(PKG_PREFIX):].replace("/", ".").removesuffix(".py")
        try:
            return importlib.import_module(module_name)
        except ImportError as error:
            raise DatasetError(f"{key}={path!r}: module {module_name!r} does not import ({type(error).__name__}: "
                               f"{error}); put its package on PYTHONPATH or give the path of its .py file"
                               f"{_verl_hint(error)}") from error
    return _import_file(path.removeprefix(FILE_PREFIX), key)


def _import_file(file: str, key: str) -> ModuleType:
    resolved = os.path.abspath(os.path.expanduser(os.path.expandvars(file)))
    if not os.path.isfile(resolved):
        raise DatasetError(f"{key}={file!r} is not a file (looked at {resolved}); give a .py file or a module as "
                           f"pkg://package.module")
    # One module per file and process: the train and validation datasets share the class (and its globals).
    module_name = f"hybridrl_user_{hashlib.sha1(resolved.encode()).hexdigest()[:12]}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    try:
        return exec_file_as_module(module_name, resolved)
    except NotPythonSource as error:
        raise DatasetError(f"{key}={file!r} cannot be imported as Python; use a .py file") from error
    except Exception as error:
        raise DatasetError(f"{key}={file!r}: importing {resolved} failed: {type(error).__name__}: {error}"
                           f"{_verl_hint(error)}") from error


def _verl_hint(error: BaseException) -> str:
    missing = getattr(error, "name", None) or ""
    if missing.split(".")[0] != "verl":
        return ""
    return ("; the file imports verl, which hybridrl does not install: a dataset class need not subclass verl's "
            "RLHFDataset (any class with __len__ and __getitem__ taking (data_files, tokenizer, config, processor) "
            "works), and a sampler need not subclass verl's AbstractSampler (any class with __iter__ and __len__ "
            "taking (data_source, data_config))")


def accepted_keywords(cls: type, offered: dict[str, Any]) -> dict[str, Any]:
    """The subset of `offered` that `cls(...)` accepts by keyword (all of it when it takes **kwargs)."""
    parameters = inspect.signature(cls).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return dict(offered)
    names = {p.name for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                     inspect.Parameter.KEYWORD_ONLY)}
    return {key: value for key, value in offered.items() if key in names}
