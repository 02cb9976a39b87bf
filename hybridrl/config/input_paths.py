"""Every file and directory a run reads, checked before anything loads: one ConfigError lists each missing one
with its key. Torch-free, so `hybridrl print-config --validate` and `hybridrl train` run it first."""

from __future__ import annotations

import os
import re
from typing import Any, Iterator

from hybridrl.config.data_rules import user_class_files
from hybridrl.config.errors import ConfigError
from hybridrl.config.interaction_file import KEY as INTERACTION_KEY
from hybridrl.config.interaction_file import read_interaction_entries
from hybridrl.config.placement import is_remote
from hybridrl.config.roles import critic_enabled
from hybridrl.config.schema import HybridRLConfig

# "Qwen/Qwen2.5-0.5B-Instruct": loaded from the HF cache or the hub, so no local path is expected.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def expand(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(str(path)))


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(item) for item in value]


def _model_paths(cfg: HybridRLConfig) -> Iterator[tuple[str, str]]:
    model = cfg.actor_rollout_ref.model
    yield "actor_rollout_ref.model.path", model.path
    if model.tokenizer_path:
        yield "actor_rollout_ref.model.tokenizer_path", model.tokenizer_path
    critic_path = cfg.critic.model.path
    if critic_enabled(cfg) and not is_remote(cfg.critic.type, critic_path) and critic_path != model.path:
        yield "critic.model.path", critic_path
    rm = cfg.reward_model
    if rm.enable and not is_remote(rm.type, rm.model.path):
        yield "reward_model.model.path", rm.model.path


def _file_paths(cfg: HybridRLConfig) -> Iterator[tuple[str, str]]:
    for key, value in (("data.train_files", cfg.data.train_files), ("data.val_files", cfg.data.val_files)):
        for path in _listed(value):
            yield key, path
    rollout = cfg.actor_rollout_ref.rollout
    optional = (("custom_reward_function.path", cfg.custom_reward_function.path),
                ("actor_rollout_ref.rollout.multi_turn.tool_config_path", rollout.multi_turn.tool_config_path),
                (INTERACTION_KEY, rollout.multi_turn.interaction_config_path),
                ("actor_rollout_ref.rollout.agent.agent_loop_config_path", rollout.agent.agent_loop_config_path))
    for key, value in optional:
        if value:
            yield key, value
    yield from user_class_files(cfg.data)


def missing_paths(cfg: HybridRLConfig) -> list[str]:
    """One line per path the run needs that does not exist: the key, the value and what it should be."""
    problems = [f"{key}={path!r}: no such file" for key, path in _file_paths(cfg) if not os.path.isfile(expand(path))]
    for key, path in _model_paths(cfg):
        if not os.path.exists(expand(path)) and not _HUB_ID.match(str(path)):
            problems.append(f"{key}={path!r}: no such directory (a local HF model directory, or a hub id such as "
                            f"Qwen/Qwen2.5-0.5B-Instruct where the hub or its cache is reachable)")
    trainer = cfg.trainer
    if trainer.resume_mode == "resume_path":
        if not trainer.resume_from_path:
            problems.append("trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_N folder)")
        elif not os.path.isdir(expand(trainer.resume_from_path)):
            problems.append(f"trainer.resume_from_path={trainer.resume_from_path!r}: no such directory")
    return problems


def check_input_paths(cfg: HybridRLConfig) -> None:
    """Raise one ConfigError naming every missing input path (data, models, reward function, tool and interaction
    configs); then the interaction YAML is read and checked (its entries' shape, no class imported yet)."""
    problems = missing_paths(cfg)
    if problems:
        raise ConfigError("paths the run reads do not exist:\n" + "\n".join(f"  - {p}" for p in problems)
                          + "\nfix the paths, or write the data first (e.g. `hybridrl preprocess gsm8k`)")
    interaction_config = cfg.actor_rollout_ref.rollout.multi_turn.interaction_config_path
    if interaction_config:
        read_interaction_entries(interaction_config)
