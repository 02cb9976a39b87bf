"""Plain Python functions as tools (`multi_turn.function_tool_path`, verl's `@function_tool`).

The OpenAI schema comes from the function's type hints and Google-style docstring through
`transformers.utils.get_json_schema` (as in verl): every argument needs a type hint and an `Args:` line.
A file loaded from `function_tool_path` offers its `@function_tool` functions; a file without any
decorator offers every public function defined in it (plain typed functions).

Where a call runs (`executor`): `async def` tools on the event loop; plain functions on the agent loops'
thread pool (`auto`/`thread`), so a slow function never stalls the engine loop; `process` runs them in a
pool of spawned processes, for CPU-heavy pure-Python work that would otherwise compete with the engine
loop for the GIL (the function must live in an importable module or in the function_tool_path file).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from hybridrl.rollout.tools.executors import ToolExecutors
from hybridrl.rollout.tools.schema import ToolSchema
from hybridrl.utils.python_files import exec_file_as_module

EXECUTORS = ("auto", "thread", "process")
_MARK = "__hybridrl_function_tool__"


@dataclass
class FunctionTool:
    """A function offered as a tool: no per-trajectory lifecycle (tools_kwargs do not reach it)."""

    name: str
    fn: Callable[..., Any]
    tool_schema: ToolSchema
    executor: str = "auto"
    # Where a spawned process finds `fn` again: its module, and the file when that module is not importable.
    module_name: str = ""
    source_file: str | None = None

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


def function_tool(name: str | Callable | None = None, *, schema: ToolSchema | dict | None = None,
                  executor: str = "auto") -> Any:
    """Mark a function as a tool: `@function_tool`, `@function_tool("name")`, `@function_tool(executor="process")`.

    `schema` replaces the inferred OpenAI schema (for signatures JSON schema cannot express). The function is
    returned unchanged, so it stays callable and testable as plain Python."""
    if executor not in EXECUTORS:
        raise ValueError(f"@function_tool executor={executor!r} is not one of {EXECUTORS}")

    def decorate(fn: Callable) -> Callable:
        setattr(fn, _MARK, {"name": tool_name or fn.__name__, "schema": schema, "executor": executor})
        return fn

    if callable(name):
        tool_name = None
        return decorate(name)
    tool_name = name
    return decorate


def make_function_tool(fn: Callable, name: str | None = None, schema: ToolSchema | dict | None = None,
                       executor: str = "auto") -> FunctionTool:
    """A FunctionTool for `fn` (schema inferred from hints and docstring unless given)."""
    mark = getattr(fn, _MARK, {})
    name = name or mark.get("name") or fn.__name__
    schema = schema if schema is not None else mark.get("schema")
    executor = mark.get("executor", executor)
    if isinstance(schema, dict):
        schema = ToolSchema.from_dict(schema, where=f"function tool {name}")
    return FunctionTool(name=name, fn=fn, tool_schema=schema or schema_from_function(fn, name), executor=executor,
                        module_name=fn.__module__)


def schema_from_function(fn: Callable, name: str) -> ToolSchema:
    """The OpenAI schema of `fn` from its type hints and Google-style docstring."""
    from transformers.utils import get_json_schema

    where = f"function tool {name!r} ({fn.__module__}.{fn.__qualname__})"
    variadic = [p.name for p in inspect.signature(fn).parameters.values()
                if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if variadic:
        raise ValueError(f"{where} takes *{variadic[0]}: a tool schema needs named arguments; replace it with "
                         f"explicit parameters")
    try:
        raw = get_json_schema(fn)
    except Exception as error:  # transformers' DocstringParsingException / TypeHintParsingException
        raise ValueError(f"{where}: cannot build its schema ({error}); give it a Google-style docstring with an "
                         f"`Args:` line per argument and a type hint on every argument, or pass schema=...") from error
    raw["function"]["name"] = name
    raw["function"].pop("return", None)
    return ToolSchema.from_dict(raw, where=where)


def load_function_tools(path: str) -> list[FunctionTool]:
    """The tools of the Python file `path` (or importable module, e.g. hybridrl.rollout.tools.builtin.calculator):
    its `@function_tool` functions, else all its public functions."""
    is_module = not os.path.exists(os.path.expanduser(path)) and _looks_like_module(path)
    module = importlib.import_module(path) if is_module else _import_file(path)
    defined = [value for key, value in vars(module).items() if inspect.isfunction(value)
               and value.__module__ == module.__name__ and not key.startswith("_")]
    marked = [fn for fn in defined if hasattr(fn, _MARK)]
    chosen = marked or defined
    if not chosen:
        raise ValueError(f"multi_turn.function_tool_path={path!r} defines no public function; write typed functions "
                         f"with Google-style docstrings there (optionally decorated with @function_tool)")
    tools = [make_function_tool(fn) for fn in chosen]
    for tool in tools:
        tool.source_file = None if is_module else os.path.abspath(os.path.expanduser(path))
    return tools


def _looks_like_module(path: str) -> bool:
    return not path.endswith(".py") and all(part.isidentifier() for part in path.split("."))


def _import_file(path: str) -> ModuleType:
    absolute = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(absolute):
        raise FileNotFoundError(f"multi_turn.function_tool_path={path!r} does not exist")
    # A name derived from the path: the same file loads once, and a spawned process can load it under this name.
    module_name = "_hybridrl_function_tools_" + absolute.replace(os.sep, "_").replace(".", "_")
    if module_name in sys.modules:
        return sys.modules[module_name]
    return import_file_as(module_name, absolute)


def import_file_as(module_name: str, path: str) -> ModuleType:
    """Execute the Python file `path` as module `module_name` (registered in sys.modules)."""
    from hybridrl.rollout.tools.verl_compat import verl_tool_modules

    with verl_tool_modules(path):
        return exec_file_as_module(module_name, path)


def call_by_reference(module_name: str, source_file: str | None, qualname: str, arguments: dict[str, Any]) -> Any:
    """Run `module:qualname(**arguments)` (in a spawned tool process: the module is imported or loaded there)."""
    module = sys.modules.get(module_name)
    if module is None:
        module = import_file_as(module_name, source_file) if source_file else importlib.import_module(module_name)
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part)
    return target(**arguments)


async def run_function(tool: FunctionTool, arguments: dict[str, Any], executors: ToolExecutors) -> Any:
    """Call `tool` with the model's arguments where its `executor` says."""
    if tool.is_async:
        return await tool.fn(**arguments)
    if tool.executor == "process":
        if "<locals>" in tool.fn.__qualname__:
            raise RuntimeError(f"function tool {tool.name!r} is defined inside a function; executor='process' needs "
                               f"a module-level function")
        return await executors.in_process(call_by_reference, tool.module_name, tool.source_file,
                                          tool.fn.__qualname__, arguments)
    return await executors.in_tool_thread(lambda: tool.fn(**arguments))
