"""`hybridrl export <global_step_dir> <out_dir> [--role actor|critic] [--is-value-model]`."""

from __future__ import annotations

import argparse
import sys

from hybridrl.checkpoint.hf_export import export_checkpoint
from hybridrl.checkpoint.manager import CheckpointError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hybridrl export", description=__doc__)
    parser.add_argument("step_dir", help="a global_step_N directory (or its actor/ or critic/ folder)")
    parser.add_argument("out_dir", help="where to write the HF model directory")
    parser.add_argument("--role", default="actor", choices=["actor", "critic"])
    parser.add_argument("--is-value-model", action="store_true", help="export a critic (token classification)")
    parser.add_argument("--adapter-only", action="store_true",
                        help="LoRA checkpoints: write the peft adapter instead of a merged model")
    args = parser.parse_args(argv)
    is_value = args.is_value_model or args.role == "critic"
    try:
        out = export_checkpoint(args.step_dir, args.out_dir, role=args.role, is_value_model=is_value,
                                adapter_only=args.adapter_only)
    except CheckpointError as err:
        print(f"hybridrl export: {err}", file=sys.stderr)
        return 2
    print(f"exported {args.role} to {out}")
    return 0
