"""`hybridrl convert megatron-to-hf | hf-to-megatron`: checkpoint conversion in both directions."""

from __future__ import annotations

import argparse
import sys

import torch

from hybridrl.models.errors import ModelLoadError

_DTYPES = {"auto": None, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hybridrl convert", description="Convert between Megatron-LM and HF.")
    sub = parser.add_subparsers(dest="direction", required=True)
    to_hf = sub.add_parser("megatron-to-hf", help="Megatron checkpoint (classic or torch_dist) -> HF directory")
    to_hf.add_argument("--input", required=True, help="Megatron checkpoint dir (with the tracker) or iteration dir")
    to_hf.add_argument("--output", required=True, help="HF model directory to write (safetensors)")
    to_hf.add_argument("--hf-config", help="directory with the HF config.json to use (default: infer from args)")
    to_hf.add_argument("--tokenizer", help="tokenizer directory to copy into the output (and size the vocabulary)")
    to_hf.add_argument("--dtype", choices=sorted(_DTYPES), default="auto", help="auto: the checkpoint's dtype")
    to_mg = sub.add_parser("hf-to-megatron", help="HF directory -> classic Megatron checkpoint")
    to_mg.add_argument("--input", required=True, help="HF model directory (Llama, Mistral, Qwen2, Qwen3)")
    to_mg.add_argument("--output", required=True, help="Megatron checkpoint directory to write")
    to_mg.add_argument("--tp", type=int, required=True, help="tensor-parallel size")
    to_mg.add_argument("--pp", type=int, default=1, help="pipeline-parallel size")
    to_mg.add_argument("--transformer-impl", choices=["transformer_engine", "local"], default="transformer_engine",
                       help="parameter names of megatron-core's TE (default) or local layer spec")
    to_mg.add_argument("--iteration", type=int, help="write iter_NNNNNNN (default: release/)")
    to_mg.add_argument("--make-vocab-size-divisible-by", type=int, default=128, help="Megatron's vocab padding")
    to_mg.add_argument("--dtype", choices=sorted(_DTYPES), default="auto", help="auto: the HF config's dtype")
    return parser


def megatron_to_hf_dir(opts: argparse.Namespace) -> str:
    from hybridrl.models.megatron.load import load_megatron_as_hf

    model = load_megatron_as_hf(opts.input, hf_config_path=opts.hf_config, dtype=_DTYPES[opts.dtype],
                                tokenizer_path=opts.tokenizer)
    model.save_pretrained(opts.output)
    if opts.tokenizer:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(opts.tokenizer).save_pretrained(opts.output)
    return f"wrote {type(model).__name__} to {opts.output}"


def hf_to_megatron_dir(opts: argparse.Namespace) -> str:
    from transformers import AutoConfig, AutoModelForCausalLM

    from hybridrl.models.megatron.spec import spec_from_hf_config
    from hybridrl.models.megatron.writer import save_hf_as_megatron

    config = AutoConfig.from_pretrained(opts.input)
    spec = spec_from_hf_config(config)
    dtype = _DTYPES[opts.dtype] or "auto"
    model = AutoModelForCausalLM.from_pretrained(opts.input, dtype=dtype)
    iter_dir = save_hf_as_megatron(model.state_dict(), spec, opts.output, tp=opts.tp, pp=opts.pp,
                                   transformer_impl=opts.transformer_impl, iteration=opts.iteration,
                                   divisible_by=opts.make_vocab_size_divisible_by)
    return f"wrote a TP={opts.tp} PP={opts.pp} Megatron checkpoint to {iter_dir}"


def main_convert(argv: list[str]) -> int:
    """Entry point of `hybridrl convert ...`; returns the exit status (1 with a one-line error)."""
    try:
        opts = _parser().parse_args(argv)
    except SystemExit as exit_:  # --help or a usage error: argparse already printed why
        return int(exit_.code or 0)
    run = megatron_to_hf_dir if opts.direction == "megatron-to-hf" else hf_to_megatron_dir
    try:
        print(run(opts))
    except (ModelLoadError, OSError) as err:
        print(f"hybridrl convert: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0
