"""Layers import only downward (DESIGN.md §1): entry points → trainer → workers → engines/groups/checkpoints
→ math/data/rewards/models → config → leaves. Lazy imports inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hybridrl"
LAYERS = [
    {"cli", "cli_help", "__main__", "quickstart", "model_merger", "trainer/main_ppo"},
    {"trainer"},
    {"workers"},
    {"rollout", "distributed", "checkpoint", "serving"},
    {"algorithms", "data", "rewards", "models"},
    {"config"},
    {"utils", "logging", "errors", "__init__"},
]


def layer_of(module_path: str) -> int:
    """Layer index of 'pkg/sub/mod' (an entry-point module beats its package's layer)."""
    for candidate in (module_path, module_path.split("/")[0]):
        for index, names in enumerate(LAYERS):
            if candidate in names:
                return index
    raise AssertionError(f"hybridrl/{module_path}.py is in no layer of tests/test_layers.py; add it to one")


def imported_modules(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return [n.removeprefix("hybridrl.").replace(".", "/") for n in names if n.startswith("hybridrl.")]


def test_imports_point_downward():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        source = path.relative_to(PACKAGE).with_suffix("").as_posix()
        for target in imported_modules(ast.parse(path.read_text())):
            if layer_of(target) < layer_of(source):
                upward.append(f"hybridrl/{source}.py imports hybridrl/{target}")
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)
