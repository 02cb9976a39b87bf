"""`hybridrl export <checkpoint> <out_dir> [--role actor|critic] [--is-value-model] [--adapter-only]`.

<checkpoint> is a run's checkpoint folder (its latest step), a global_step_N folder, or one of its actor/ or
critic/ folders; a critic/ folder exports the critic (a value model) without --role.
"""

from __future__ import annotations

import argparse
import os
import sys

from hybridrl.checkpoint.hf_export import export_checkpoint
from hybridrl.checkpoint.manager import CheckpointError

ROLES = ("actor", "critic")


def infer_role(path: str, role: str | None) -> str:
    """The role to export: --role when given (it must agree with a role folder), else the folder's own name."""
    folder = os.path.basename(os.path.normpath(path))
    if folder in ROLES:
        if role is not None and role != folder:
            raise CheckpointError(f"{path!r} is the {folder}'s folder but --role {role} was given; pass its "
                                  f"global_step_N folder with --role {role}, or drop --role")
        return folder
    return role or "actor"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hybridrl export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step_dir", help="the run's checkpoint folder, a global_step_N folder, or its actor/ or "
                                         "critic/ folder")
    parser.add_argument("out_dir", help="where to write the HF model directory")
    parser.add_argument("--role", default=None, choices=ROLES, help="default: the folder's role, else actor")
    parser.add_argument("--is-value-model", action="store_true", help="export a critic (token classification)")
    parser.add_argument("--adapter-only", action="store_true",
                        help="LoRA checkpoints: write the peft adapter instead of a merged model")
    args = parser.parse_args(argv)
    try:
        role = infer_role(args.step_dir, args.role)
        out = export_checkpoint(args.step_dir, args.out_dir, role=role,
                                is_value_model=args.is_value_model or role == "critic", adapter_only=args.adapter_only)
    except CheckpointError as err:
        print(f"hybridrl export: {err}", file=sys.stderr)
        return 2
    print(f"exported {role} to {out}")
    return 0
