"""Keys verl spells twice for one setting, kept equal: the one a source set is copied onto the other.

verl's own defaults set both spellings (a dumped config lists `reward_model.reward_manager: naive` beside
`reward_manager.name: ${oc.select:reward_model.reward_manager,naive}`), so "set" means set by the command line,
or by a file to a value other than hybridrl's default (`overrides.TreeEditor.explicit`). The command line wins
over a file; two spellings set by the same source must agree once resolved.
"""

from __future__ import annotations

from typing import Any

from hybridrl.config.index import get_in, set_in
from hybridrl.config.overrides import CLI

ROLES_WITH_ULYSSES = (
    ("actor_rollout_ref.actor.ulysses_sequence_parallel_size", "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size"),
    ("actor_rollout_ref.ref.ulysses_sequence_parallel_size", "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size"),
    ("critic.ulysses_sequence_parallel_size", "critic.model.fsdp_config.ulysses_sequence_parallel_size"),
)
PAIRS: tuple[tuple[str, str], ...] = (
    *ROLES_WITH_ULYSSES,
    ("reward_model.reward_manager", "reward_manager.name"),
    ("actor_rollout_ref.actor.grad_clip", "actor_rollout_ref.actor.optim.clip_grad"),  # verl's newer optimizer
    ("critic.grad_clip", "critic.optim.clip_grad"),  # configs carry the clip too
)


def copy_set_spelling(tree: dict[str, Any], explicit: dict[str, str]) -> list[tuple[str, str]]:
    """Before `${...}` resolution: copy the winning spelling onto the other (in place). Returns the pairs set
    by one source whose resolved values `compare_pairs` must check."""
    to_compare = []
    for first, second in PAIRS:
        sources = (explicit.get(first), explicit.get(second))
        if sources == (None, None):
            continue
        if sources[0] == sources[1]:
            to_compare.append((first, second))
            continue
        winner, loser = (first, second) if _rank(sources[0]) > _rank(sources[1]) else (second, first)
        set_in(tree, loser, get_in(tree, winner))
    return to_compare


def _rank(source: str | None) -> int:
    return {None: 0, CLI: 2}.get(source, 1)


def compare_pairs(resolved: dict[str, Any], pairs: list[tuple[str, str]]) -> list[str]:
    """After resolution: two spellings set by one source must hold the same value."""
    problems = []
    for first, second in pairs:
        a, b = get_in(resolved, first), get_in(resolved, second)
        if a != b:
            problems.append(f"{first}={a!r} and {second}={b!r} are two spellings of one setting; set only one")
    return problems


def derived_settings(tree: dict[str, Any], explicit: dict[str, str]) -> list[str]:
    """Settings verl derives from other keys: a bare-string logger, `remove_previous_ckpt_in_save`."""
    problems = []
    logger = get_in(tree, "trainer.logger")
    if isinstance(logger, str):
        set_in(tree, "trainer.logger", [logger])  # verl's Tracking wraps a bare string too
    if get_in(tree, "trainer.remove_previous_ckpt_in_save") is True:
        for key in ("trainer.max_actor_ckpt_to_keep", "trainer.max_critic_ckpt_to_keep"):
            value = get_in(tree, key)
            if key in explicit and value not in (None, 1):
                problems.append(f"trainer.remove_previous_ckpt_in_save=true means {key}=1, but {key}={value!r}; set one")
            set_in(tree, key, 1)
    return problems
