"""Load a user's reward function from a Python file (verl `custom_reward_function.path` / `.name`)."""

from __future__ import annotations

import functools
import inspect
import logging
from pathlib import Path
from types import ModuleType
from typing import Any, Callable
from hybridrl.utils.python_files import NotPythonSource, exec_file_as_module

log = logging.getLogger(__name__)


def load_custom_reward_fn(path: str, name: str = "compute_score", reward_kwargs: dict | None = None,
                          offered_kwargs: dict | None = None) -> Callable:
    """`name` from the file at `path`, with `reward_kwargs` bound as keyword arguments, and those of
    `offered_kwargs` it takes (`accepted_kwargs`).

    The function is called as verl does: fn(data_source, solution_str, ground_truth, extra_info=None, **kwargs)
    and returns a float or a dict with a "score" key (other keys are logged as extra info).
    """
    file = verl_scorer_file(Path(path).expanduser())
    if not file.is_file():
        raise FileNotFoundError(f"custom_reward_function.path={path!r} is not a file; point it at a .py file "
                                f"defining {name}(data_source, solution_str, ground_truth, extra_info=None, **kwargs)")
    module = import_python_file(file)
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(attr for attr, value in vars(module).items()
                       if callable(value) and not attr.startswith("_") and not inspect.isclass(value)
                       and getattr(value, "__module__", None) == module.__name__)
        raise AttributeError(f"custom_reward_function.name={name!r}: {file} defines no function {name!r}; "
                             f"functions found there: {found or 'none'}; set custom_reward_function.name to one")
    bound = {**accepted_kwargs(fn, offered_kwargs or {}, f"{file}:{name}"), **(reward_kwargs or {})}
    return functools.wraps(fn)(functools.partial(fn, **bound)) if bound else fn


def accepted_kwargs(fn: Callable, offered: dict[str, Any], where: str) -> dict[str, Any]:
    """The entries of `offered` that `fn` takes: all of them with **kwargs, else those it names. verl's reward
    loop passes a served GenRM's `reward_router_address` and `reward_model_tokenizer` to every custom function;
    here a function that cannot take them does not get them (and is told once that it cannot query the GenRM)."""
    if not offered:
        return {}
    parameters = inspect.signature(fn).parameters.values()
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return dict(offered)
    names = {parameter.name for parameter in parameters
             if parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    taken = {key: value for key, value in offered.items() if key in names}
    if len(taken) < len(offered):
        log.warning("the reward function %s does not take %s (nor **kwargs), so it is called without them; a "
                    "function that queries the served reward model declares them", where,
                    " or ".join(sorted(set(offered) - set(taken))))
    return taken


# verl's own scorer files that its examples name as custom_reward_function.path -> hybridrl's equivalents
VERL_SCORER_FILES = {"rlla.py": "rlla.py", "math_verify.py": "math_verify.py", "math_batch.py": "math_batch.py"}


def verl_scorer_file(file: Path) -> Path:
    """A path into verl's `verl/utils/reward_score/` that does not exist here (verl is not installed) means
    hybridrl's module of the same scorer, so verl's example scripts (e.g. GDPO's rlla.py) run unchanged."""
    if file.is_file() or file.parent.parts[-3:] != ("verl", "utils", "reward_score") or file.name not in VERL_SCORER_FILES:
        return file
    ours = Path(__file__).with_name(VERL_SCORER_FILES[file.name])
    log.info("custom_reward_function.path=%s is verl's %s; using hybridrl's equivalent %s", file, file.name, ours)
    return ours


def import_python_file(file: Path) -> ModuleType:
    """The Python file at `file` as a fresh module (ImportError naming the file when it fails to import)."""
    module_name = f"hybridrl_custom_reward_{abs(hash(str(file.resolve())))}"
    try:
        return exec_file_as_module(module_name, file)
    except NotPythonSource as error:
        raise ImportError(f"custom_reward_function.path={str(file)!r} cannot be imported as Python; use a .py file") \
            from error
    except Exception as error:
        raise ImportError(f"importing the custom reward file {file} failed: {type(error).__name__}: {error}") from error
