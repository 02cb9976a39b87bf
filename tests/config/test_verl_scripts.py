"""verl-shaped scripts (tests/config/verl_scripts/) through `print-config --validate`, and three of them trained.

Each script runs under bash with the stand-in commands of benchmarks/verl_script_capture.py, so what reaches
`main_ppo` is exactly what the script gives verl (arrays, defaults, `$@` expanded by bash).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import pytest

from hybridrl.config.cli import main_print_config

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "verl_scripts"
sys.path.insert(0, str(REPO / "benchmarks"))
from verl_script_capture import capture_script  # noqa: E402
from verl_scripts import local_assets, localize  # noqa: E402


def expectation(script: Path) -> tuple[str, str]:
    """('pass', '') or ('refused', text the refusal must contain), from the script's `# expect:` line."""
    found = re.search(r"^# expect: (pass|refused)\s*(.*)$", script.read_text(), re.MULTILINE)
    assert found, f"{script.name} has no '# expect:' line"
    return found.group(1), found.group(2).strip()


def trained(script: Path) -> bool:
    return "\n# train:" in script.read_text()


def launch_args(script: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> list[str]:
    capture = capture_script(script, SCRIPTS, env=env, args=args)
    assert len(capture.launches) == 1, (capture.returncode, capture.stderr_tail)
    return capture.launches[0]


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> tuple[str, str]:
    return local_assets(tmp_path_factory.mktemp("verl_assets"))


@pytest.mark.parametrize("script", sorted(SCRIPTS.glob("*.sh")), ids=lambda p: p.stem)
def test_script_validates_or_is_refused_by_name(script, assets, capsys):
    kind, text = expectation(script)
    code = main_print_config(["--validate", "--device", "cuda", *localize(launch_args(script), SCRIPTS, *assets)])
    err = capsys.readouterr().err
    if kind == "pass":
        assert code == 0, err
    else:
        assert code == 2 and text in err, err
        assert "unknown config key" not in err and "wrong type" not in err, err


def test_suite_covers_both_generations_and_the_algorithms():
    names = [p.stem for p in SCRIPTS.glob("*.sh")]
    assert any(n.startswith("jan_") for n in names) and any(n.startswith("aug_") for n in names)
    text = " ".join(p.read_text() for p in SCRIPTS.glob("*.sh"))
    for needle in ("adv_estimator=grpo", "adv_estimator=gae", "adv_estimator=rloo", "reinforce_plus_plus", "remax",
                   "lora_rank", "loss_mode=gspo", "multi_turn", "filter_groups", "--config-name", "model_engine="):
        assert needle in text, needle
    assert sum(trained(p) for p in SCRIPTS.glob("*.sh")) == 3


TINY_RUN = ("trainer.device=cpu", "trainer.total_training_steps=2", "trainer.test_freq=-1", "trainer.save_freq=-1",
            "trainer.val_before_train=false", "trainer.logger=[file]", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            "actor_rollout_ref.actor.optim.lr=1e-3", "critic.optim.lr=1e-3", "critic.model.enable_gradient_checkpointing=false")


@pytest.mark.parametrize("script", [p for p in sorted(SCRIPTS.glob("*.sh")) if trained(p)], ids=lambda p: p.stem)
def test_script_trains_two_steps_on_cpu(script, tmp_path, arith_model_dir, arithmetic_files):
    """The script as a user runs it on a small machine: its own knobs exported (model, data, sizes, one device)
    and the CPU settings appended (`$@`)."""
    from hybridrl.trainer.main_ppo import main

    train, test = arithmetic_files
    env = {"MODEL_PATH": arith_model_dir, "TRAIN_FILE": train, "TEST_FILE": test, "TRAIN_BATCH_SIZE": "8",
           "MINI_BATCH_SIZE": "4", "PPO_MINI_BATCH_SIZE": "4", "MICRO_BATCH_SIZE": "8", "ROLLOUT_N": "4",
           "MAX_PROMPT_LENGTH": "8", "MAX_RESPONSE_LENGTH": "4", "NGPUS_PER_NODE": "1", "ROLLOUT_TP": "1"}
    args = launch_args(script, env, (*TINY_RUN, f"trainer.default_local_dir={tmp_path}"))
    assert main(args) == 0
    with open(os.path.join(tmp_path, "metrics.jsonl")) as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert math.isfinite(record["actor/pg_loss"]) and math.isfinite(record["actor/grad_norm"])


def validate_script(script: Path, assets: tuple[str, str], env: dict[str, str] | None = None,
                    args: tuple[str, ...] = ()) -> int:
    return main_print_config(["--validate", "--device", "cuda",
                              *localize(launch_args(script, env=env, args=args), SCRIPTS, *assets)])


def test_otb_scripts_validate_both_estimators_and_name_a_missing_sum_pi_squared(assets, capsys):
    """verl's OTB script takes ADV_ESTIMATOR from the environment (tir_optimal_token_baseline for multi-turn);
    without calculate_sum_pi_squared the config names the key and its fix before anything loads."""
    assert validate_script(SCRIPTS / "aug_otb.sh", assets, env={"ADV_ESTIMATOR": "tir_optimal_token_baseline"}) == 0
    capsys.readouterr()
    for script in ("aug_otb.sh", "jan_otb.sh"):
        assert validate_script(SCRIPTS / script, assets, args=("actor_rollout_ref.actor.calculate_sum_pi_squared=False",)) == 2
        assert "add actor_rollout_ref.actor.calculate_sum_pi_squared=True" in capsys.readouterr().err
