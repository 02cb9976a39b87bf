"""Keys of older verl releases whose meaning moved to several of today's keys, translated after `${...}`.

- verl 0.5: `actor_rollout_ref.actor.tis_imp_ratio_cap=C` (C > 0: truncated importance sampling, token level,
  weights capped at C; Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL").
- verl 0.6.0: `algorithm.rollout_is` (apply the weights), `rollout_is_threshold` (upper bound; null = off),
  `rollout_is_threshold_lower`, `rollout_is_level` (token|sequence|geometric), `rollout_is_mode`
  (truncate = importance sampling, mask = rejection), `rollout_is_veto_threshold`.

Both become `algorithm.rollout_correction.*`, verl's spelling since 0.7 (its migration guide, PR #3984).
"""

from __future__ import annotations

from typing import Any

from hybridrl.config.index import get_in, set_in

CORRECTION = "algorithm.rollout_correction"
TIS_CAP = "actor_rollout_ref.actor.tis_imp_ratio_cap"
V06_KEYS = {  # key -> verl 0.6.0's default
    "algorithm.rollout_is": False,
    "algorithm.rollout_is_threshold": None,
    "algorithm.rollout_is_threshold_lower": None,
    "algorithm.rollout_is_level": "token",
    "algorithm.rollout_is_mode": "truncate",
    "algorithm.rollout_is_veto_threshold": 1e-4,
}
LEGACY_KEYS = frozenset({TIS_CAP, *V06_KEYS})
_MASK_MODES = {"token": "token_k1", "sequence": "seq_sum_k1", "geometric": "seq_mean_k1"}  # verl 0.7 names


def is_legacy_key(path: str) -> bool:
    return path in LEGACY_KEYS


def _pop(tree: dict[str, Any], path: str) -> tuple[bool, Any]:
    parent, _, leaf = path.rpartition(".")
    try:
        node = get_in(tree, parent)
    except KeyError:
        return False, None
    if not isinstance(node, dict) or leaf not in node:
        return False, None
    return True, node.pop(leaf)


def translate_legacy(tree: dict[str, Any], explicit: dict[str, str]) -> tuple[list[str], list[str]]:
    """Move the legacy keys of a resolved tree onto `algorithm.rollout_correction.*` (in place).
    Returns (problems, notices): a value with no equivalent today is a problem naming the replacement."""
    wanted: dict[str, Any] = {}
    problems, notices = [], []
    found, cap = _pop(tree, TIS_CAP)
    if found and cap is not None and cap > 0:
        wanted = {"rollout_is": "token", "rollout_is_threshold": cap}
        source = f"{TIS_CAP}={cap!r}"
    old = {key: _pop(tree, key) for key in V06_KEYS}
    if any(present for present, _ in old.values()):
        values = {key: (value if present else V06_KEYS[key]) for key, (present, value) in old.items()}
        v06, v06_problems, v06_notices = _from_v06(values)
        problems += v06_problems
        notices += v06_notices
        if v06 and wanted:
            problems.append(f"{source} and verl 0.6's algorithm.rollout_is* keys both set rollout correction; keep one")
        elif v06:
            wanted, source = v06, "algorithm.rollout_is*"
    for key, value in wanted.items():
        path = f"{CORRECTION}.{key}"
        if path in explicit and get_in(tree, path) != value:
            problems.append(f"{source} means {path}={value!r}, but {path}={get_in(tree, path)!r}; set one")
        else:
            set_in(tree, path, value)
    return problems, notices


def _from_v06(values: dict[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    upper, apply = values["algorithm.rollout_is_threshold"], values["algorithm.rollout_is"]
    if upper is None:
        return {}, [], []  # verl 0.6: a null threshold turns the whole feature off
    if not apply:
        return {}, [], [f"algorithm.rollout_is=false with rollout_is_threshold={upper}: verl 0.6 only logged the "
                         "mismatch metrics; nothing is applied (set algorithm.rollout_correction.rollout_is=token to "
                         "apply truncated importance weights)"]
    level, mode = values["algorithm.rollout_is_level"], values["algorithm.rollout_is_mode"]
    problems, notices = [], []
    veto = values["algorithm.rollout_is_veto_threshold"]
    if veto is not None and veto != V06_KEYS["algorithm.rollout_is_veto_threshold"]:
        problems.append(f"algorithm.rollout_is_veto_threshold={veto!r}: verl 0.7 removed the veto and hybridrl follows "
                        "it; drop the key (rejection sampling is algorithm.rollout_correction.rollout_rs)")
    elif veto is not None:
        notices.append("algorithm.rollout_is_veto_threshold (verl 0.6's default 1e-4) is not applied: verl 0.7 removed the veto")
    if level not in _MASK_MODES or mode not in ("truncate", "mask"):
        return {}, problems + [f"algorithm.rollout_is_level={level!r} / rollout_is_mode={mode!r}: verl 0.6 accepted "
                               "level token|sequence|geometric and mode truncate|mask"], notices
    if mode == "mask":
        lower = values["algorithm.rollout_is_threshold_lower"] or 1.0 / upper
        return {"rollout_rs": _MASK_MODES[level], "rollout_rs_threshold": f"{lower}_{upper}"}, problems, notices
    if level == "geometric":
        return {}, problems + [f"algorithm.rollout_is_level=geometric with rollout_is_mode=truncate: verl 0.7 has no "
                               f"geometric importance weights; use algorithm.rollout_correction.rollout_rs=seq_mean_k1 "
                               f"rollout_rs_threshold={upper}"], notices
    return {"rollout_is": level, "rollout_is_threshold": upper}, problems, notices
