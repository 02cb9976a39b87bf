"""verl's spelling of the export: `python -m hybridrl.model_merger merge --backend fsdp --local_dir
<global_step_N/actor> --target_dir <out>` (also `--is-value-model` for a critic)."""

from __future__ import annotations

import argparse
import sys

from hybridrl.checkpoint.hf_export import export_checkpoint
from hybridrl.checkpoint.manager import CheckpointError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hybridrl.model_merger")
    sub = parser.add_subparsers(dest="command", required=True)
    merge = sub.add_parser("merge", help="write a plain HF model directory from a checkpoint")
    merge.add_argument("--backend", default="fsdp", choices=["fsdp"],
                       help="checkpoint backend (hybridrl writes unsharded fsdp-style checkpoints)")
    merge.add_argument("--local_dir", required=True, help="global_step_N/actor (or critic, or global_step_N)")
    merge.add_argument("--target_dir", required=True)
    merge.add_argument("--is-value-model", action="store_true")
    merge.add_argument("--tie-word-embedding", action="store_true",
                       help="accepted for verl compatibility; tying follows the saved config")
    args = parser.parse_args(argv)
    role = "critic" if args.is_value_model else "actor"
    try:
        out = export_checkpoint(args.local_dir, args.target_dir, role=role, is_value_model=args.is_value_model)
    except CheckpointError as err:
        print(f"model_merger: {err}", file=sys.stderr)
        return 2
    print(f"merged {args.local_dir} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
