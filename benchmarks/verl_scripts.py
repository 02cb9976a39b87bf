"""How many of verl's own example and recipe scripts hybridrl accepts unchanged: `print-config --validate` on the
arguments each script gives `verl.trainer.main_ppo`, with only model and data paths pointed at local files.

    git -C /work/.mirror/volcengine+verl/repo archive HEAD | tar -x -C /tmp/verl_jan
    git -C /work/.mirror/verl-project+verl-recipe/repo archive HEAD | tar -x -C /tmp/verl_recipe
    python benchmarks/verl_scripts.py /tmp/verl_jan --recipe /tmp/verl_recipe --name jan-2026 --out jan.json

Each script runs under bash with stand-in commands (`verl_script_capture.py`), so its variables, arrays,
defaults and `$@` expand as they would. A recipe checkout is mounted at `<checkout>/recipe` (verl's submodule
path: recipe scripts run from verl's root). Every launch is validated from the checkout's root as working
directory, on `--device cuda` by default (verl's scripts are GPU scripts; print-config sees no GPU otherwise).

Per script: `passed`; `refused_by_name` (a feature hybridrl names as not implemented, with the reason);
`needs_package` (valid, but a tracker named in trainer.logger is not installed here); `failed` (anything else);
`not_extracted` (the script stopped before launching); `failed_in_verl_too` counts the failures verl meets
as well (an argument Hydra's parser rejects, a config folder that does not exist, a key verl does not have, a
missing reward function file, an empty node or GPU count, a sequence-parallel size the ranks cannot hold). Refused scripts are grouped by why (`refused_by_group`):
`engine` (Megatron, VeOmni, ... : the N-D parallelism issue), `npu` (out of scope), `parallelism` (sequence,
expert, pipeline parallel sizes), `being_built` (features other work in progress adds: validation generations,
policy losses and estimators, agent loops, rollout correction, DAPO sampling), `other`. `goal_rate` counts as
passing every script but the failed, unextracted and `other`-refused ones (the issue's goal, >= 90%). Per key: how
many scripts set it and how many of those were refused because of it or found it unknown. Prints one JSON object
(and writes it with --out).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from verl_script_capture import capture_script, environment_note, find_scripts  # noqa: E402

MODEL_KEYS = re.compile(r"(^|\.)(model\.path|model_path|tokenizer_path|input_tokenizer|hf_config_path)$|^data\.tokenizer$")
DATA_KEYS = ("data.train_files", "data.val_files")
NAMED_REFUSAL = re.compile(r"not implemented|not supported|out of scope|hybridrl ships its own|removed")
LOCAL_ASSETS = "local_assets"
# Failures verl meets too: Hydra's parser (the same one) rejects an argument, or a config folder does not exist.
# Failures verl meets too: Hydra's parser, a missing config folder, a key verl's struct config lacks, a reward
# function file the tree does not have (verl loads it at start-up), a node or GPU count left empty by an unset
# environment variable (verl multiplies them), a sequence-parallel size its ranks cannot hold (verl's device mesh).
VERL_REJECTS_TOO = re.compile(r"^cannot parse the override|^config file '.*' does not exist|"
                              r"verl's config has no such key either|^custom_reward_function\.path='.*': no such file|"
                              r"^trainer\.(nnodes|n_gpus_per_node)='' has the wrong type|"
                              r"ulysses_sequence_parallel_size=\d+ (needs at least \d+ ranks|must divide)")
# Why a key is refused, for the goal: scripts refused only for Megatron-style engines (the N-D parallelism
# issue), NPUs (out of scope) or features other engineers are building count apart from other refusals.
REFUSAL_GROUPS = (
    ("engine", re.compile(r"\.strategy$|^model_engine$")),
    ("npu", re.compile(r"^trainer\.device$|^global_profiler\.tool$")),  # refused only for the Ascend NPU tools
    ("parallelism", re.compile(r"ulysses_sequence_parallel_size$|rollout\.(expert|pipeline_model|data)_parallel_size$")),
    ("being_built", re.compile(r"^trainer\.log_val_generations$|policy_loss\.loss_mode$|^algorithm\.adv_estimator$|"
                               r"multi_turn\.enable$|agent\.agent_loop_config_path$|^algorithm\.rollout_correction\.|"
                               r"^algorithm\.filter_groups\.enable$|calculate_sum_pi_squared$")),
)


@dataclass
class ScriptResult:
    script: str
    status: str
    reasons: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    refused_keys: list[str] = field(default_factory=list)
    unknown_keys: list[str] = field(default_factory=list)
    launches: int = 0


def local_assets(folder: Path) -> tuple[str, str]:
    """A model folder and a parquet file standing in for the script's own (print-config reads neither)."""
    model = folder / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text("{}")
    data = folder / "train.parquet"
    data.touch()
    return str(model), str(data)


def localize(args: list[str], checkout: Path, model: str, data: str) -> list[str]:
    """Point model and data paths at local files; make checkout-relative file paths absolute. A model or data
    path the script leaves out (set in a config file, or verl's default: `~/data/rlhf/gsm8k/*.parquet` from
    verl's preprocessing, `~/models/deepseek-llm-7b-chat`) is pointed at the local stand-in too, so a missing
    file is never what a script is measured on."""
    out = []
    for arg in args:
        prefix, key, value = _split(arg)
        if key is None:
            out.append(arg)
        elif MODEL_KEYS.search(key):
            out.append(f"{prefix}{key}={model}")
        elif key in DATA_KEYS:
            out.append(f"{prefix}{key}=[{data}]" if value.lstrip().startswith("[") else f"{prefix}{key}={data}")
        elif key.endswith("path") and value and not value.startswith(("/", "$", "[")) and (checkout / value).exists():
            out.append(f"{prefix}{key}={checkout / value}")
        else:
            out.append(arg)
    given = {key for _, key, _ in map(_split, out)}
    missing = {key: data for key in DATA_KEYS if key not in given}
    if "actor_rollout_ref.model.path" not in given:
        missing["actor_rollout_ref.model.path"] = model
    return out + [f"{key}={value}" for key, value in missing.items()]


def _split(arg: str) -> tuple[str, str | None, str]:
    if arg.startswith("-") or "=" not in arg:
        return "", None, ""
    body = arg.lstrip("+~")
    key, _, value = body.partition("=")
    return arg[: len(arg) - len(body)], key, value


def validate(args: list[str], device: str) -> tuple[int, str]:
    """print-config --validate in this process: (exit code, stderr)."""
    from hybridrl.config.cli import main_print_config

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main_print_config(["--validate", "--device", device, *args])
    return code, err.getvalue()


def problems_of(stderr: str) -> list[str]:
    lines = [line.strip().removeprefix("- ").removeprefix("config error: ") for line in stderr.splitlines()]
    return [line for line in lines if line and not re.match(r"^\d+ config problem", line)]


def classify(code: int, stderr: str) -> tuple[str, list[str], list[str], list[str]]:
    """(status, reasons, refused keys, unknown keys) of one validation."""
    if code == 0:
        return "passed", [], [], []
    problems = problems_of(stderr)
    unknown = [m.group(1) for p in problems if (m := re.match(r"unknown config key '([^']+)'", p))]
    refusals = [p for p in problems if NAMED_REFUSAL.search(p) and not p.startswith("unknown config key")]
    refused = [m.group(1) for p in refusals if (m := re.match(r"([\w.]+)=", p))]
    if refusals:
        return "refused_by_name", refusals, refused, unknown
    if any("is not installed" in p or "pip install" in p for p in problems) and not unknown:
        return "needs_package", problems, [], []
    return "failed", problems, [], unknown


def run_script(script: Path, checkout: Path, assets: tuple[str, str], device: str) -> ScriptResult:
    rel = str(script.relative_to(checkout))
    capture = capture_script(script, checkout)
    if not capture.launches:
        return ScriptResult(rel, "not_extracted", [f"exit {capture.returncode}: {capture.stderr_tail.strip()[-200:]}"])
    result = ScriptResult(rel, "passed", launches=len(capture.launches))
    order = ["passed", "needs_package", "refused_by_name", "failed"]
    for args in capture.launches:
        local = localize(args, checkout, *assets)
        result.keys += [key for _, key, _ in map(_split, local) if key]
        with _cwd(checkout):
            status, reasons, refused, unknown = classify(*validate(local, device))
        result.reasons += reasons
        result.refused_keys += refused
        result.unknown_keys += unknown
        if order.index(status) > order.index(result.status):
            result.status = status
    result.keys = sorted(set(result.keys))
    return result


@contextlib.contextmanager
def _cwd(path: Path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@contextlib.contextmanager
def _quiet_loader():
    """The loader's info lines, once per script, would bury the report: only errors while validating."""
    import logging

    logger = logging.getLogger("hybridrl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def mount_recipe(checkout: Path, recipe: Path) -> None:
    target = checkout / "recipe"
    if target.is_symlink() or (target.exists() and any(target.iterdir())):
        return
    if target.exists():
        target.rmdir()
    target.symlink_to(recipe.resolve(), target_is_directory=True)


def refusal_group(key: str) -> str:
    return next((group for group, pattern in REFUSAL_GROUPS if pattern.search(key)), "other")


def script_group(result: ScriptResult) -> str | None:
    """For a refused script, why: `engine` or `npu` when any refusal is (the script waits for that whatever else it
    sets), else `other` when any refusal is, else `parallelism` or `being_built`."""
    if result.status != "refused_by_name":
        return None
    groups = {refusal_group(key) for key in result.refused_keys} or {"other"}
    for group in ("engine", "npu", "other", "parallelism", "being_built"):
        if group in groups:
            return group
    return "other"


def summarize(name: str, results: list[ScriptResult], device: str) -> dict:
    counts = Counter(r.status for r in results)
    refused_by = Counter(script_group(r) for r in results if r.status == "refused_by_name")
    verl_too = sum(1 for r in results if r.status == "failed" and any(VERL_REJECTS_TOO.search(p) for p in r.reasons))
    total = len(results)
    keys: dict[str, Counter] = {}
    for r in results:
        for key in r.keys:
            keys.setdefault(key, Counter())["scripts"] += 1
        for key in set(r.refused_keys):
            keys.setdefault(key, Counter())["refused"] += 1
        for key in set(r.unknown_keys):
            keys.setdefault(key, Counter())["unknown"] += 1
    top = lambda field: sorted(((k, c[field]) for k, c in keys.items() if c[field]), key=lambda kc: -kc[1])[:25]  # noqa: E731
    return {
        "tree": name, "device": device, "scripts": total, **{s: counts.get(s, 0) for s in
        ("passed", "refused_by_name", "needs_package", "failed", "not_extracted")},
        "pass_rate": round(counts.get("passed", 0) / total, 4) if total else None,
        "pass_or_package_rate": round((counts.get("passed", 0) + counts.get("needs_package", 0)) / total, 4) if total else None,
        "refused_by_group": dict(refused_by), "failed_in_verl_too": verl_too,
        "goal_rate": round((counts.get("passed", 0) + counts.get("needs_package", 0) + sum(
            n for group, n in refused_by.items() if group != "other")) / total, 4) if total else None,
        "distinct_keys": len(keys),
        "top_refused_keys": top("refused"), "top_unknown_keys": top("unknown"),
        "environment": environment_note(),
        "results": [{k: v for k, v in asdict(r).items() if k != "keys"} for r in results],  # keys: counted below
        "keys": {k: dict(c) for k, c in sorted(keys.items())},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a verl checkout (exported with git archive)")
    parser.add_argument("--recipe", type=Path, help="a verl-recipe checkout, mounted at <checkout>/recipe")
    parser.add_argument("--name", default=None, help="name of the tree in the report")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="device type validated for")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    if args.recipe:
        mount_recipe(checkout, args.recipe)
    scripts = [s for folder in ("examples", "recipe") if (checkout / folder).is_dir()
               for s in find_scripts(checkout / folder)]
    with tempfile.TemporaryDirectory(prefix="verl_scripts_") as tmp, _quiet_loader():
        assets = local_assets(Path(tmp) / LOCAL_ASSETS)
        results = [run_script(script, checkout, assets, args.device) for script in scripts]
    report = summarize(args.name or checkout.name, results, args.device)
    text = json.dumps(report, separators=(",", ":"))
    if args.out:
        args.out.write_text(text)
    print(json.dumps({k: v for k, v in report.items() if k not in ("results", "keys")}, indent=1))
    return report


if __name__ == "__main__":
    main()
