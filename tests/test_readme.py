"""The README as a user meets it: its training command passes every configuration check, its measured numbers
are exactly what scripts/readme_table.py generates from benchmarks/results/, its links resolve, and it stays a
front page (no development log, about two screens)."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import sys
from pathlib import Path

from hybridrl.config import load_config
from hybridrl.trainer.preflight import preflight

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MODULE = "hybridrl.trainer.main_ppo"


def readme_training_overrides() -> list[str]:
    """The key=value arguments of the README's first `python -m hybridrl.trainer.main_ppo` command."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    command = next(block for block in blocks if f"python -m {MODULE}" in block)
    words = shlex.split(os.path.expandvars(command.replace("\\\n", " ")))
    return words[words.index(MODULE) + 1:]


def readme_table_module():
    spec = importlib.util.spec_from_file_location("readme_table", REPO / "scripts" / "readme_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_the_readme_training_command_passes_the_configuration_checks():
    overrides = readme_training_overrides()
    assert "actor_rollout_ref.model.path=/models/Qwen2.5-0.5B-Instruct" in overrides  # the block was found
    cfg = load_config(overrides + ["trainer.device=cpu"])  # the checks themselves, on any machine
    preflight(cfg)


def test_the_readme_numbers_are_generated_from_the_benchmark_json():
    text = README.read_text()
    assert readme_table_module().render(text) == text, "README.md's numbers are stale: run `make readme-table`"


def test_every_table_row_names_its_command_json_and_same_run_peer():
    table = readme_table_module().benchmark_table()
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    notes = [line for line in table.splitlines() if re.match(r"\d+\. `", line)]
    assert rows and len(rows) == len(notes)
    for note in notes:
        assert "python benchmarks/" in note and "](benchmarks/results/" in note
    for row in rows:
        assert len(row.split(" | ")) == 4 and "x" in row.split(" | ")[-1]  # hybridrl | peer | ratio


def test_readme_links_resolve_and_it_stays_a_front_page():
    text = README.read_text()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith("http"):
            assert (REPO / target).exists(), f"README links to {target}, which does not exist"
    assert len(text.splitlines()) <= 130, "the README is a front page: move detail into docs/"
    prose = re.sub(r"`[^`]*`|\]\([^)]*\)", "", text).lower()  # result file names may carry their session
    for word in ("session", "work period", "device call", "was lent"):
        assert word not in prose, f"development history ({word!r}) belongs in benchmarks/README.md"


def test_rollout_row_reads_a_warm_peers_report():
    """The rollout row (generated once the H200 report exists) takes its ratios from one report's numbers."""
    table = readme_table_module()
    report = {"main": {"engine": {"gen_tok_s": 150_000.0}, "hf": {"gen_tok_s": 15_000.0},
                       "hf_static": {"gen_tok_s": 30_000.0}}}
    assert table._rollout([report]) == ("150.0k generated tokens/s",
                                        "HF `generate`: 15.0k; static cache + `torch.compile`: 30.0k", "10.0x; 5.0x")
    del report["main"]["hf_static"]
    assert table._rollout([report])[2] == "10.0x" and "failed" in table._rollout([report])[1]
