"""hybridrl's copies of verl's config files (`ppo_trainer.yaml`, `actor/dp_actor.yaml`, ...), made from the schema.

verl scripts name these files (`--config-path=config --config-name=ppo_megatron_trainer`, a recipe YAML whose
defaults list says `- ppo_trainer`, or `actor@actor_rollout_ref.actor: dp_actor`); `compose.py` finds them
here. Each group file holds the schema's defaults of the section verl puts it at, so composing
`ppo_trainer.yaml` gives exactly `index.default_tree()` (tests/config/test_verl_files.py checks both).
The engine variants (`megatron_actor`, ...) differ only in `strategy`, which names the engine hybridrl
refuses. Regenerate after a schema change: `python -m hybridrl.config.verl_files`.
"""

from __future__ import annotations

import copy
import os
import sys
from typing import Any

import yaml

from hybridrl.config.compose import VERL_CONFIG_DIR
HEADER = "# Generated from hybridrl's schema by `python -m hybridrl.config.verl_files`; do not edit.\n"
# verl's model_engine choices (dp = FSDP; mlite = the Megatron-LM "lite" backend verl's plugin package registers)
ENGINES = ("dp", "megatron", "torchtitan", "veomni", "mlite")
_STRATEGY = {"dp": None, "megatron": "megatron", "torchtitan": "torchtitan", "veomni": "veomni", "mlite": "mlite"}

# file (without .yaml) -> (section it is placed at in ppo_trainer, keys set on top of the schema defaults)
GROUP_FILES: dict[str, tuple[str, dict[str, Any]]] = {
    "rollout/rollout": ("actor_rollout_ref.rollout", {}),
    "model/hf_model": ("actor_rollout_ref.model", {}),
    "data/legacy_data": ("data", {}),
    "reward_manager": ("reward_manager", {}),
    "algorithm/rollout_correction": ("algorithm.rollout_correction", {}),
    "engine/fsdp": ("actor_rollout_ref.actor.fsdp_config", {}),
    "optim/fsdp": ("actor_rollout_ref.actor.optim", {}),
    "actor/actor": ("actor_rollout_ref.actor", {}),
    "ref/ref": ("actor_rollout_ref.ref", {}),
    "critic/critic": ("critic", {}),
    "reward_model/reward_model": ("reward_model", {}),
    "reward_model/dp_reward_model": ("reward_model", {}),
    "reward_model/megatron_reward_model": ("reward_model", {"strategy": "megatron"}),
    **{f"{group}/{engine}_{group}": (section, {"strategy": _STRATEGY[engine]} if _STRATEGY[engine] else {})
       for engine in ENGINES
       for group, section in (("actor", "actor_rollout_ref.actor"), ("ref", "actor_rollout_ref.ref"),
                              ("critic", "critic"))},
    **{f"reward_model/{engine}_reward_loop": ("reward_model", {"strategy": _STRATEGY[engine]} if _STRATEGY[engine] else {})
       for engine in ENGINES},
}  # fmt: skip
TRAINER_DEFAULTS = [
    {"model_engine": "dp"},
    {"actor@actor_rollout_ref.actor": "${model_engine}_actor"},
    {"data@data": "legacy_data"},
    "reward_manager@reward_manager",
    {"ref@actor_rollout_ref.ref": "${model_engine}_ref"},
    {"rollout@actor_rollout_ref.rollout": "rollout"},
    {"model@actor_rollout_ref.model": "hf_model"},
    {"critic@critic": "${model_engine}_critic"},
    {"reward_model@reward_model": "${model_engine}_reward_loop"},
    {"algorithm@algorithm.rollout_correction": "rollout_correction"},
    "_self_",
]
COMPOSED_SECTIONS = ("actor_rollout_ref.actor", "data", "reward_manager", "actor_rollout_ref.ref",
                     "actor_rollout_ref.rollout", "actor_rollout_ref.model", "critic", "reward_model",
                     "algorithm.rollout_correction", "model_engine")  # fmt: skip


def _subtree(tree: dict[str, Any], path: str) -> Any:
    node: Any = tree
    for part in path.split("."):
        node = node[part]
    return copy.deepcopy(node)


def _without(tree: dict[str, Any], paths: tuple[str, ...]) -> dict[str, Any]:
    out = copy.deepcopy(tree)
    for path in paths:
        *parents, leaf = path.split(".")
        node = out
        for part in parents:
            node = node[part]
        del node[leaf]
    return out


def _dump(content: dict[str, Any], package: str | None = None) -> str:
    head = (f"# @package {package}\n" if package else "") + HEADER  # Hydra reads the directive on the first line
    return head + yaml.safe_dump(content, sort_keys=False, default_flow_style=False, width=120)


def render_files() -> dict[str, str]:
    """Every file's text, by path relative to VERL_CONFIG_DIR."""
    from hybridrl.config.index import default_tree

    tree = default_tree()
    files = {}
    for name, (section, changes) in GROUP_FILES.items():
        files[name + ".yaml"] = _dump({**_subtree(tree, section), **changes})
    for engine in ENGINES:
        files[f"model_engine/{engine}.yaml"] = _dump({"model_engine": engine}, package="_global_")
    self_part = _without(tree, COMPOSED_SECTIONS)
    files["ppo_trainer.yaml"] = _dump({"defaults": TRAINER_DEFAULTS, **self_part})
    files["ppo_megatron_trainer.yaml"] = _dump(
        {"defaults": ["ppo_trainer", {"override model_engine": "megatron"}, "_self_"]}
    )
    return files


def write_files(folder: str = VERL_CONFIG_DIR) -> list[str]:
    """Write every file (removing stale ones); returns the paths written."""
    files = render_files()
    for root, _, names in os.walk(folder):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), folder)
            if name.endswith(".yaml") and rel not in files:
                os.remove(os.path.join(root, name))
    for rel, text in files.items():
        path = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return sorted(files)


if __name__ == "__main__":
    print(f"wrote {len(write_files())} files under {VERL_CONFIG_DIR}", file=sys.stderr)
