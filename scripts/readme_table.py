"""The README's measured numbers, generated from the JSON files in benchmarks/results/ (never typed by hand).

    python scripts/readme_table.py           # print the generated blocks
    python scripts/readme_table.py --write   # replace them in README.md

Each row names its command, its JSON file and its peer measured in the same run; a ratio is only ever taken
between two numbers of one run (or one call, for the one-mode-per-GPU capacity search). A row whose JSON file is
not in the repository is left out. tests/test_readme.py checks that README.md holds exactly this output.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
README = REPO / "README.md"
T = ("--hybridrl-override reward_model.launch_reward_fn_async=true --hybridrl-override "
     "actor_rollout_ref.actor.use_dynamic_bsz=true --hybridrl-override "
     "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=49152")
C = "--response-length 1024 --gpu-memory-utilization 1.0 --trial-timeout 300 --time-budget 565 --granularity 32"
QUICKSTART_JSON = "quickstart_cpu_2core.json"
QUICKSTART_TOOL_JSON = "quickstart_tool_cpu_2core.json"


@dataclass(frozen=True)
class Row:
    """One table row: what was measured, how its cells come out of its JSON files, and the command that made them."""

    what: str
    files: tuple[str, ...]
    cells: Callable[[list[dict[str, Any]]], tuple[str, str, str]]  # (hybridrl, peer, ratio)
    commands: tuple[str, ...]


def thousands(value: float) -> str:
    return f"{value / 1000:.1f}k"


def _step_vs_trl(reports: list[dict]) -> tuple[str, str, str]:
    report = reports[0]
    ours, trl = report["hybridrl"]["hybrid"]["tokens_per_s"], report["trl"]["tokens_per_s"]
    return (f"{thousands(ours)} tokens/s", f"TRL `GRPOTrainer` (HF `generate`, its default): {thousands(trl)}",
            f"{ours / trl:.2f}x")


def _memory(reports: list[dict]) -> tuple[str, str, str]:
    peaks = reports[0]["comparison"]["peak_memory_gb"]
    hybrid, offload, separate = peaks["hybrid"], peaks["hybrid_offload"], peaks["separate"]
    return (f"{hybrid:.2f} GB ({offload:.2f} GB with optimizer and reference offload)",
            f"KV cache kept through training: {separate:.2f} GB",
            f"{hybrid / separate:.2f}x ({offload / separate:.2f}x)")


def _largest_fit(report: dict) -> int:
    return max(trial["sequences"] for trial in report["trials"] if trial["result"] == "fit")


def _capacity(reports: list[dict]) -> tuple[str, str, str]:
    hybrid, separate = (_largest_fit(report) for report in reports)
    return (f"{hybrid:,} sequences", f"KV cache kept through training: {separate:,}", f"{hybrid / separate:.2f}x")


def _two_gpus(reports: list[dict]) -> tuple[str, str, str]:
    one, two = (report["hybridrl"]["hybrid"]["tokens_per_s"] for report in reports)
    return f"{thousands(two)} tokens/s on 2 GPUs", f"the same on 1 GPU: {thousands(one)}", f"{two / one:.2f}x"


def _rollout(reports: list[dict]) -> tuple[str, str, str]:
    main = reports[0]["main"]
    ours, hf = main["engine"]["gen_tok_s"], main["hf"]["gen_tok_s"]
    if "hf_static" not in main:  # HF's compiled path failed in that run: the JSON holds its error
        return (f"{thousands(ours)} generated tokens/s", f"HF `generate`: {thousands(hf)} (static cache + "
                f"`torch.compile` failed: see the JSON)", f"{ours / hf:.1f}x")
    static = main["hf_static"]["gen_tok_s"]
    return (f"{thousands(ours)} generated tokens/s", f"HF `generate`: {thousands(hf)}; static cache + "
            f"`torch.compile`: {thousands(static)}", f"{ours / hf:.1f}x; {ours / static:.1f}x")


def _async(reports: list[dict]) -> tuple[str, str, str]:
    runs = reports[0]["runs"]
    ours, sync = runs["colocate_async_kept_kv"], runs["sync"]
    late = thousands(ours["tokens_per_s_last_half"])
    return (f"{thousands(ours['tokens_per_s'])} trained tokens/s (later half {late})",
            f"hybridrl's synchronous trainer: {thousands(sync['tokens_per_s'])} "
            f"(later half {thousands(sync['tokens_per_s_last_half'])})",
            f"{ours['tokens_per_s'] / sync['tokens_per_s']:.2f}x "
            f"({ours['tokens_per_s_last_half'] / sync['tokens_per_s_last_half']:.2f}x)")


ROWS: tuple[Row, ...] = (
    Row("Rollout: 64 prompts × 8 samples × 256 tokens, every peer warmed by a full-size call",
        ("rollout_bench_h200_warm_peers.json",), _rollout,
        ("python benchmarks/rollout_bench.py --skip-extras",)),
    Row("Full GRPO step (KL loss, one optimizer step), 64 prompts × 8 × 256 tokens",
        ("rl_step_h200_session3_speed.json",), _step_vs_trl,
        (f"python benchmarks/rl_step_bench.py --only hybrid,trl --steps 4 --warmup-steps 2 $T",)),
    Row("Peak GPU memory of that step, default keys", ("rl_step_h200_session3_memory.json",), _memory,
        ("python benchmarks/rl_step_bench.py --only hybrid,hybrid_offload,separate --steps 4 --warmup-steps 2",)),
    Row("Largest batch, 1024-token responses, one generation wave (2 H200s, one mode each, same call)",
        ("capacity_x2_session7a_hybrid.json", "capacity_x2_session7a_separate.json"), _capacity,
        ("CUDA_VISIBLE_DEVICES=0 python benchmarks/capacity_bench.py --modes hybrid $C --start-prompts 1280 "
         "--max-prompts 1312",
         "CUDA_VISIBLE_DEVICES=1 python benchmarks/capacity_bench.py --modes separate $C --start-prompts 1040 "
         "--max-prompts 1072")),
    Row("Asynchronous GRPO (`colocate_async`, `max_off_policy_strategy=wait`, S=8, parked requests keep their KV), "
        "64 prompts × 8, EOS-stopped responses (median ~300, up to 2048), 28 steps",
        ("async_bench_h200_threshold_8_kept_kv_wait_28_steps.json",), _async,
        ("python benchmarks/async_bench.py --modes sync,colocate_async_kept_kv --threshold 8 --warmup-steps 2 "
         "--steps 28 --hybridrl-override trainer.v1.sampler.max_off_policy_strategy=wait",)),
    Row("GRPO step on 2 H200s (FSDP2, colocated) against 1, same call",
        ("rl_step_x2_session11_g1_run1.json", "rl_step_x2_session11_g2_run1.json"), _two_gpus,
        ("CUDA_VISIBLE_DEVICES=0 python benchmarks/rl_step_bench.py --only hybrid --steps 4 --warmup-steps 2 $T",
         "python benchmarks/rl_step_bench.py --only hybrid --steps 4 --warmup-steps 2 $T "
         "--hybridrl-override trainer.n_gpus_per_node=2")),
)


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name).read_text())


def benchmark_table() -> str:
    """The markdown table (one H200 unless a row says otherwise) and its numbered commands and JSON files."""
    lines = ["| measured (Qwen2.5-0.5B shape, one H200 unless noted) | hybridrl | peer, same run | ratio |",
             "|---|---|---|---|"]
    notes = []
    for row in (r for r in ROWS if all((RESULTS / f).is_file() for f in r.files)):
        ours, peer, ratio = row.cells([load(f) for f in row.files])
        lines.append(f"| {row.what} [{len(notes) + 1}] | {ours} | {peer} | {ratio} |")
        sources = ", ".join(f"[`{f}`](benchmarks/results/{f})" for f in row.files)
        notes.append(f"{len(notes) + 1}. " + " and ".join(f"`{c}`" for c in row.commands) + f" → {sources}")
    variables = (f"`$T` = `{T}`; `$C` = `{C}`. Workloads and every other figure: "
                 "[benchmarks/README.md](benchmarks/README.md).")
    return "\n".join(lines + [""] + notes + ["", variables])


def quickstart_line() -> str:
    """The quickstart's expected result, from the JSON its own command wrote on the CI machine."""
    result = load(QUICKSTART_JSON)
    points = result["curve"][::4]
    curve = f"at steps {'/'.join(str(step) for step, _ in points)}: " + " → ".join(f"{100 * v:.1f}%" for _, v in points)
    # The run's seconds stay in the JSON: on a shared machine they measure its load, not the quickstart.
    return (f"Expected (seed {result['seed']}, `{result['command']}` on a {result['machine']['cpu_count']}-core "
            f"CPU → [`{QUICKSTART_JSON}`](benchmarks/results/{QUICKSTART_JSON})): sampled validation accuracy "
            f"{100 * result['val_accuracy_before']:.1f}% → {100 * result['val_accuracy_after']:.1f}% after "
            f"{result['steps']} GRPO steps ({curve}).")


def quickstart_tool_line() -> str:
    """The tool quickstart's expected result: accuracy and calculator calls per answer, before and after RL."""
    result = load(QUICKSTART_TOOL_JSON)
    curve = (f"at steps {'/'.join(str(step) for step, _, _ in result['curve'])}: "
             + " → ".join(f"{100 * accuracy:.1f}%" for _, accuracy, _ in result["curve"]))
    return (f"Expected (seed {result['seed']}, `{result['command']}` on a {result['machine']['cpu_count']}-core CPU → "
            f"[`{QUICKSTART_TOOL_JSON}`](benchmarks/results/{QUICKSTART_TOOL_JSON})): after a "
            f"{result['warm_start']['steps']}-step warm start, sampled validation accuracy "
            f"{100 * result['val_accuracy_before']:.1f}% → {100 * result['val_accuracy_after']:.1f}% and calculator "
            f"calls per answer {result['val_tool_calls_before']:.2f} → {result['val_tool_calls_after']:.2f} after "
            f"{result['steps']} GRPO steps ({curve}).")


BLOCKS: dict[str, Callable[[], str]] = {"quickstart": quickstart_line, "quickstart-tool": quickstart_tool_line,
                                        "benchmarks": benchmark_table}


def markers(name: str) -> tuple[str, str]:
    return (f"<!-- generated:{name} by scripts/readme_table.py from benchmarks/results/; do not edit -->",
            f"<!-- end generated:{name} -->")


def render(text: str) -> str:
    """`text` with every generated block replaced by the script's current output."""
    for name, make in BLOCKS.items():
        start, end = markers(name)
        if start not in text or end not in text:
            raise ValueError(f"README.md lacks the markers of the {name!r} block:\n{start}\n{end}")
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{start}\n{make()}\n{end}{tail}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the blocks in README.md")
    args = parser.parse_args(argv)
    if args.write:
        README.write_text(render(README.read_text()))
        print(f"updated {README}")
    else:
        for make in BLOCKS.values():
            print(make() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
