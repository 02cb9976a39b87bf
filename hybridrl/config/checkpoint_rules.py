"""What `*.checkpoint.save_contents` / `load_contents` may name, and the rules `validate_config` checks.

verl's semantics (`verl/utils/checkpoint/checkpoint_manager.py`): each list names the parts a save writes
and a resume reads. A misspelt name or an empty list used to write checkpoints without weights and resume
from the initial ones; here both are refused before the run starts. Torch-free.
"""

from __future__ import annotations

import difflib
from typing import Any

CONTENTS: dict[str, str] = {
    "model": "the weights (model.safetensors): what a resume continues from",
    "optimizer": "the optimizer state (Adam moments, step counts): a resume without it restarts the moments",
    "extra": "the LR schedule's position and the RNG states: without it the schedule restarts and sampling differs",
    "hf_model": "a full HF model copy under huggingface/ for other tools (export only: a resume reads 'model')",
}
RESUMABLE = ("model", "optimizer", "extra")  # what a resume can read back

ROLES = {"actor": "actor_rollout_ref.actor.checkpoint", "critic": "critic.checkpoint"}


def _sections(cfg: Any) -> list[tuple[str, Any]]:
    """(dotted prefix, checkpoint section) of the actor and the critic."""
    return [(ROLES["actor"], cfg.actor_rollout_ref.actor.checkpoint), (ROLES["critic"], cfg.critic.checkpoint)]


def checkpoint_content_problems(cfg: Any) -> list[str]:
    """Unknown names (with did-you-mean), empty lists, and save/load lists that cannot resume this run."""
    problems = []
    resumes = cfg.trainer.resume_mode != "disable"
    for prefix, section in _sections(cfg):
        save, load = list(section.save_contents), list(section.load_contents)
        found = _name_problems(f"{prefix}.save_contents", save) + _name_problems(f"{prefix}.load_contents", load)
        if found:
            problems += found
            continue
        if resumes:
            problems += _resume_problems(prefix, save, load)
    return problems


def _name_problems(key: str, names: list[Any]) -> list[str]:
    if not names:
        return [f"{key}=[] saves or loads nothing, so a resume would start from the initial weights; "
                f"list some of: {_listing()} (default: [model, optimizer, extra])"]
    problems = []
    for name in names:
        if name in CONTENTS:
            continue
        close = difflib.get_close_matches(str(name), list(CONTENTS), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        problems.append(f"{key} has unknown part {name!r}; {hint}the parts are: {_listing()}")
    return problems


def _resume_problems(prefix: str, save: list[str], load: list[str]) -> list[str]:
    """With resume on, this run's own checkpoints must hold what a resume of them reads."""
    problems = []
    missing = [name for name in load if name in RESUMABLE and name not in save]
    if missing:
        problems.append(f"{prefix}.load_contents reads {missing} but {prefix}.save_contents={save} does not write "
                        f"them, so this run's checkpoints could not be resumed; add them to save_contents or drop "
                        f"them from load_contents")
    return problems


def export_only_notices(cfg: Any) -> list[str]:
    """verl resumes checkpoints whose load_contents reads no resumable part (only hf_model, an export): the step
    count continues from the initial weights. Allowed, as in verl, and said."""
    if cfg.trainer.resume_mode == "disable":
        return []
    notices = []
    for prefix, section in _sections(cfg):
        load = list(section.load_contents)
        if load and all(name in CONTENTS for name in load) and not any(name in RESUMABLE for name in load):
            notices.append(f"warning: {prefix}.load_contents={load} reads nothing a resume can use (hf_model is an "
                           f"export): a resume would continue the step count from the initial weights, as in verl; "
                           f"add 'model' to resume training, or set trainer.resume_mode=disable when these "
                           f"checkpoints are exports only")
    return notices


def _listing() -> str:
    return "; ".join(f"{name} = {meaning}" for name, meaning in CONTENTS.items())
