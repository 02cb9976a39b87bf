"""Load a user's reward function from a Python file (verl `custom_reward_function.path` / `.name`)."""

from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Callable


def load_custom_reward_fn(path: str, name: str = "compute_score", reward_kwargs: dict | None = None) -> Callable:
    """`name` from the file at `path`, with `reward_kwargs` bound as keyword arguments.

    The function is called as verl does: fn(data_source, solution_str, ground_truth, extra_info=None, **kwargs)
    and returns a float or a dict with a "score" key (other keys are logged as extra info).
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"custom_reward_function.path={path!r} is not a file; point it at a .py file "
                                f"defining {name}(data_source, solution_str, ground_truth, extra_info=None, **kwargs)")
    module = _import_file(file)
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(attr for attr, value in vars(module).items()
                       if callable(value) and not attr.startswith("_") and not inspect.isclass(value)
                       and getattr(value, "__module__", None) == module.__name__)
        raise AttributeError(f"custom_reward_function.name={name!r}: {file} defines no function {name!r}; "
                             f"functions found there: {found or 'none'}; set custom_reward_function.name to one")
    return functools.wraps(fn)(functools.partial(fn, **reward_kwargs)) if reward_kwargs else fn


def _import_file(file: Path):
    module_name = f"hybridrl_custom_reward_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"custom_reward_function.path={str(file)!r} cannot be imported as Python; use a .py file")
    module = importlib.util.module_from_spec(spec)
    # Registered before exec so dataclasses/pickling inside the file can find their module.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise ImportError(f"importing the custom reward file {file} failed: {type(error).__name__}: {error}") from error
    return module
