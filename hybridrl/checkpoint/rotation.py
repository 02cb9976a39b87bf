"""Which checkpoints to keep: the N newest saves, by save order, never the ones a resume depends on.

`trainer.max_actor_ckpt_to_keep` / `max_critic_ckpt_to_keep` (null or 0: keep all, as verl). Every save
records a `save_index` (one more than the largest in the folder) in its `trainer_state.json`, so "newest"
means saved last, not highest step: after `resume_mode=resume_path` to an earlier step, or a fresh run in a
used folder, the new saves are the newest and the old, higher-numbered ones go first. Never removed: the
checkpoint the tracker names and the one this run resumed from. A step folder goes when its actor state
does; with fewer critic checkpoints kept, older steps lose only their `critic/` folder (recorded, so a
resume from one says why it cannot). As verl, a save with N >= 2 first makes room by keeping N - 1
(the new save then makes N), and N = 1 keeps the previous checkpoint until the new one is complete.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from typing import Any

from hybridrl.logging.log import get_logger

log = get_logger("hybridrl.checkpoint")
STATE_FILE = "trainer_state.json"


@dataclass(frozen=True)
class Retention:
    """How many checkpoints to keep per role (None: all)."""

    actor: int | None = None
    critic: int | None = None

    @classmethod
    def from_config(cls, cfg: Any) -> Retention:
        """From `trainer.max_actor_ckpt_to_keep` / `max_critic_ckpt_to_keep` of a HybridRLConfig."""
        trainer = cfg.trainer
        return cls(_count(trainer.max_actor_ckpt_to_keep), _count(trainer.max_critic_ckpt_to_keep))


def _count(value: int | None) -> int | None:
    return value if value is not None and value > 0 else None


@dataclass(frozen=True)
class SavedCheckpoint:
    step: int
    path: str
    save_index: int  # -1: saved by an earlier hybridrl (older than every indexed save)
    mtime: float


def read_state(step_dir: str) -> dict:
    try:
        with open(os.path.join(step_dir, STATE_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def write_state(step_dir: str, state: dict) -> None:
    path = os.path.join(step_dir, STATE_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)


def saved_checkpoints(step_dirs: list[tuple[int, str]]) -> list[SavedCheckpoint]:
    """`(step, path)` folders as saves, oldest first (save order; earlier-format saves by time)."""
    saves = []
    for step, path in step_dirs:
        state_path = os.path.join(path, STATE_FILE)
        mtime = os.path.getmtime(state_path) if os.path.exists(state_path) else os.path.getmtime(path)
        saves.append(SavedCheckpoint(step, path, int(read_state(path).get("save_index", -1)), mtime))
    return sorted(saves, key=lambda s: (s.save_index, s.mtime, s.step))


def next_save_index(step_dirs: list[tuple[int, str]]) -> int:
    return max((s.save_index for s in saved_checkpoints(step_dirs)), default=-1) + 1


def rotate(step_dirs: list[tuple[int, str]], retention: Retention, protected: set[str], *,
           before_save: bool = False) -> list[str]:
    """Remove what `retention` does not keep; returns the removed folders. `before_save`: make room for one more
    save (N - 1 kept for N >= 2; nothing removed for N = 1, whose one checkpoint stays until the next is done)."""
    saves = saved_checkpoints(step_dirs)
    keep = _real(protected)
    removed = []
    actor = _kept(retention.actor, before_save)
    if actor is not None:
        for save in _older_than_newest(saves, actor):
            if os.path.realpath(save.path) not in keep:
                shutil.rmtree(save.path, ignore_errors=True)
                removed.append(save.path)
        saves = [s for s in saves if s.path not in removed]
    critic = _kept(retention.critic, before_save)
    if critic is not None:
        for save in _older_than_newest(saves, critic):
            if os.path.realpath(save.path) not in keep:
                _drop_critic(save.path)
    if removed:
        log.info("removed %d older checkpoint(s) (trainer.max_actor_ckpt_to_keep=%s): %s", len(removed),
                 retention.actor, ", ".join(os.path.basename(p) for p in removed))
    return removed


def _older_than_newest(saves: list[SavedCheckpoint], count: int) -> list[SavedCheckpoint]:
    """All but the `count` newest of `saves` (oldest first)."""
    return saves[:max(0, len(saves) - count)]


def _kept(limit: int | None, before_save: bool) -> int | None:
    if limit is None:
        return None
    if before_save:
        return limit - 1 if limit >= 2 else None
    return limit


def _real(paths: set[str]) -> set[str]:
    return {os.path.realpath(p) for p in paths}


def _drop_critic(step_dir: str) -> None:
    critic = os.path.join(step_dir, "critic")
    if not os.path.isdir(critic):
        return
    state = read_state(step_dir)
    state["removed_roles"] = sorted(set(state.get("removed_roles", [])) | {"critic"})
    write_state(step_dir, state)  # first: a crash between the two leaves the reason recorded, not a bare gap
    shutil.rmtree(critic, ignore_errors=True)
    log.info("removed the critic state of %s (trainer.max_critic_ckpt_to_keep)", os.path.basename(step_dir))


def existing_checkpoints_line(step_dirs: list[tuple[int, str]], root: str, retention: Retention) -> str | None:
    """For a fresh run (resume_mode=disable) in a folder that already holds checkpoints: one line saying what
    will happen to them."""
    if not step_dirs:
        return None
    steps = [step for step, _ in step_dirs]
    shown = ", ".join(str(s) for s in steps[:5]) + (", ..." if len(steps) > 5 else "")
    fate = (f"they count as older saves, so rotation (trainer.max_actor_ckpt_to_keep={retention.actor}) deletes "
            f"them as this run saves" if retention.actor is not None else "they are kept (no rotation)")
    return (f"trainer.resume_mode=disable: {root} already holds {len(steps)} checkpoint(s) (steps {shown}) that this "
            f"run does not resume; {fate}; a save at the same step replaces one, and "
            f"latest_checkpointed_iteration.txt names this run's saves from its first save on. Use another "
            f"trainer.default_local_dir to keep them apart")
