"""`hybridrl <command>`: train, control, print-config, preprocess, export, plot, sft, quickstart, convert, serve."""

from __future__ import annotations

import sys

USAGE = """usage: hybridrl [-h] [--version] <command> [args...]

`hybridrl <command> --help` describes a command. Errors print without a traceback (HYDRA_FULL_ERROR=1 shows it).

commands:
  train [--config FILE] [key=value ...]   run PPO/GRPO training with verl-style overrides
                                          (same as: python -m hybridrl.trainer.main_ppo ...)
  control <run_dir> grow-rollout [--devices 0,1]
  control <run_dir> shrink-rollout [--devices 1]
                                          ask a running trainer to extend generation onto more devices (default:
                                          the actor's) or return borrowed ones; applied at the next step
  print-config [--docs] [--validate] [key=value ...]
                                          the resolved config as YAML; --docs: with each key's doc line;
                                          --validate: every check train makes before its first step (paths, data)
  preprocess {gsm8k,math} [flags]         write verl-format train/test parquet files
  export <checkpoint> <out_dir>           write a plain HF model (safetensors) from a checkpoint (actor/critic)
  plot <metrics.jsonl> [more ...] [-o curves.png]
                                          curves of one run or several (the algorithm's panels, stacked timing)
  sft --model DIR --train-files F --out DIR
                                          small supervised fine-tuning run (warm start)
  quickstart [--task digits|tool] [--out DIR]
                                          the embedded demo: tiny model, SFT then GRPO; digits: reverse digits,
                                          tool: multiplication with a calculator tool (multi-turn)
  convert megatron-to-hf --input DIR --output DIR [--hf-config DIR] [--tokenizer DIR]
  convert hf-to-megatron --input HF_DIR --output DIR --tp N [--pp M]
  serve --model DIR --port N [--host H] [--kind reward|value]
                                          serve a value/reward model with vLLM's pooling API (POST /pooling)
"""


def _train(argv: list[str]) -> int:
    from hybridrl.cli_help import train_help, wants_help

    if wants_help(argv):  # before importing the trainer: help needs no torch
        print(train_help())
        return 0
    from hybridrl.trainer.main_ppo import main

    return main(argv)


def _control(argv: list[str]) -> int:
    from hybridrl.elastic.control import main_control

    return main_control(argv)


def _print_config(argv: list[str]) -> int:
    from hybridrl.config.cli import main_print_config

    return main_print_config(argv, scan_data=_scan_data)


def _scan_data(cfg) -> None:
    """`print-config --validate`'s data pass: the datasets built exactly as `hybridrl train` builds them, whose
    construction scans every row once (data/scan.py); a summary line per split goes to stderr."""
    from hybridrl.config import ConfigError
    from hybridrl.errors import is_user_facing
    from hybridrl.trainer.setup import build_dataset, build_tokenizer

    try:
        _scan_splits(cfg, build_tokenizer(cfg), build_dataset)
    except Exception as exc:  # a dataset or model-loading error that names its fix: printed as a config error
        if not is_user_facing(exc):
            raise
        raise ConfigError(f"{type(exc).__name__}: {exc}") from None


def _scan_splits(cfg, tokenizer, build_dataset) -> None:
    for split in ("train", "val") if cfg.data.val_files else ("train",):
        dataset = build_dataset(cfg, tokenizer, split)
        if not dataset.prompt_lengths:  # a verl-style data.custom_cls class: its rows are read when drawn
            print(f"validated {split} data: {len(dataset)} rows from {dataset.label}; its first row read, the "
                  f"others are read (and cut per data.truncation) when drawn", file=sys.stderr)
            continue
        lengths = dataset.prompt_lengths
        print(f"validated {split} data: {len(dataset)} rows ({dataset.num_filtered} filtered as overlong), prompt "
              f"tokens max {max(lengths)} mean {sum(lengths) / len(lengths):.0f} (data.max_prompt_length="
              f"{cfg.data.max_prompt_length})", file=sys.stderr)


def _preprocess(argv: list[str]) -> int:
    import importlib

    from hybridrl.data.preprocess import PREPROCESSORS

    usage = (f"usage: hybridrl preprocess {{{','.join(PREPROCESSORS)}}} [flags]\n\n"
             "Write a dataset as verl-schema train/test parquet files; "
             "`hybridrl preprocess gsm8k --help` lists the flags.")
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if not argv or argv[0] not in PREPROCESSORS:
        print(usage, file=sys.stderr)
        return 2
    return importlib.import_module(PREPROCESSORS[argv[0]]).main(argv[1:])


def _export(argv: list[str]) -> int:
    from hybridrl.checkpoint.export_cli import main

    return main(argv)


def _plot(argv: list[str]) -> int:
    from hybridrl.logging.plot import main_plot

    return main_plot(argv)


def _sft(argv: list[str]) -> int:
    from hybridrl.sft import main

    return main(argv)


QUICKSTART_TASKS = ("digits", "tool")


def _quickstart(argv: list[str]) -> int:
    """`--task digits` (hybridrl/quickstart.py, the default) or `--task tool` (hybridrl/quickstart_tool.py); the
    other arguments are the task's own."""
    import argparse

    task_parser = argparse.ArgumentParser(prog="hybridrl quickstart", add_help=False)
    task_parser.add_argument("--task", default="digits", choices=QUICKSTART_TASKS)
    known, rest = task_parser.parse_known_args(argv)
    if known.task == "tool":
        from hybridrl.quickstart_tool import main as tool_main

        return tool_main(rest)
    from hybridrl.quickstart import main

    return main(rest)


def _convert(argv: list[str]) -> int:
    from hybridrl.models.megatron import main_convert

    return main_convert(argv)


def _serve(argv: list[str]) -> int:
    from hybridrl.serving.server import main_serve

    return main_serve(argv)


COMMANDS = {"train": _train, "control": _control, "print-config": _print_config, "preprocess": _preprocess, "export": _export,
            "plot": _plot, "sft": _sft, "quickstart": _quickstart,
            "serve": _serve, "convert": _convert}


def version_line() -> str:
    import hybridrl

    return f"hybridrl {hybridrl.__version__}"


def main(argv: list[str] | None = None) -> int:
    """Dispatch to the command; its exit status (argparse's --help and usage errors included) is returned."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-V", "--version"):
        print(version_line())
        return 0
    if argv[:1] == ["help"] and len(argv) > 1:  # `hybridrl help train` = `hybridrl train --help`
        argv = [argv[1], "--help"]
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command = argv[0]
    if command not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(command, COMMANDS, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        print(f"hybridrl: unknown command {command!r}{hint}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[command](argv[1:])
    except BrokenPipeError:  # `hybridrl ... | head`: the reader left; nothing more to say
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except SystemExit as exit_:  # argparse after --help (0) or a usage error (2): it printed why
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)


if __name__ == "__main__":
    sys.exit(main())
