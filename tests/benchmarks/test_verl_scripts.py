"""benchmarks/verl_scripts.py on a small stand-in verl checkout: extraction, local paths and the classification."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import verl_scripts  # noqa: E402
from verl_script_capture import capture_script, find_scripts  # noqa: E402

HEAD = "set -xeuo pipefail\n"
GRPO = ("algorithm.adv_estimator=grpo data.train_batch_size=64 actor_rollout_ref.actor.ppo_mini_batch_size=16 "
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 "
        "actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=4 trainer.n_gpus_per_node=8 ")
SCRIPTS = {
    "examples/grpo/run_pass.sh": HEAD + 'MODEL=${MODEL_PATH:-Qwen/Qwen3-8B}\nARGS=(data.train_files="[\'$HOME/d/a.parquet\', '
                                 "'$HOME/d/b.parquet']\" actor_rollout_ref.model.path=$MODEL)\n"
                                 f"python3 -m verl.trainer.main_ppo \\\n    {GRPO}\\\n    \"${{ARGS[@]}}\" trainer.logger=console \"$@\"\n",
    "examples/grpo/run_megatron.sh": f"python3 -m verl.trainer.main_ppo --config-path=config --config-name=ppo_megatron_trainer {GRPO}\n",
    "examples/grpo/run_typo.sh": f"python3 -m verl.trainer.main_ppo {GRPO} trainer.n_gpus=8\n",
    "examples/grpo/run_wandb.sh": f"python3 -m verl.trainer.main_ppo {GRPO} trainer.logger='[\"console\",\"wandb\"]'\n",
    "examples/grpo/run_needs_env.sh": HEAD + f'ROOT=${{DATA_ROOT:?set DATA_ROOT}}\npython3 -m verl.trainer.main_ppo {GRPO} data.train_files=$ROOT/t.parquet\n',
    "examples/grpo/run_broken.sh": "exit 3\npython3 -m verl.trainer.main_ppo\n",
    "examples/other/run_sync.sh": "python3 -m verl.trainer.main_ppo_sync a=1\n",
    "examples/other/readme_only.sh": "# python3 -m verl.trainer.main_ppo is launched by the other script\n",
    "recipe/dapo/run_dapo.sh": f"cd \"$(dirname \"$0\")/../..\"\npip install -e .\npython3 -m verl.trainer.main_ppo {GRPO} +algorithm.filter_groups.enable=True +algorithm.filter_groups.metric=acc "
                               "actor_rollout_ref.model.use_liger=True\n",
}


@pytest.fixture
def checkout(tmp_path) -> tuple[Path, Path]:
    verl, recipe = tmp_path / "verl", tmp_path / "verl_recipe"
    (verl / "recipe").mkdir(parents=True)  # the submodule folder, empty in an archive
    for rel, text in SCRIPTS.items():
        root, rel = (recipe, rel.removeprefix("recipe/")) if rel.startswith("recipe/") else (verl, rel)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return verl, recipe


def test_find_scripts_needs_a_launch_of_main_ppo(checkout):
    verl, _ = checkout
    assert sorted(p.name for p in find_scripts(verl / "examples")) == [
        "run_broken.sh", "run_megatron.sh", "run_needs_env.sh", "run_pass.sh", "run_typo.sh", "run_wandb.sh"]


def test_capture_expands_arrays_defaults_and_arguments(checkout):
    verl, _ = checkout
    capture = capture_script(verl / "examples/grpo/run_pass.sh", verl, args=("trainer.total_epochs=2",))
    (args,) = capture.launches
    assert "actor_rollout_ref.model.path=Qwen/Qwen3-8B" in args and args[-1] == "trainer.total_epochs=2"
    assert any(a.startswith("data.train_files=['/") and a.endswith("/d/b.parquet']") for a in args)
    needs = capture_script(verl / "examples/grpo/run_needs_env.sh", verl)
    assert needs.placeholders == {"DATA_ROOT": needs.placeholders["DATA_ROOT"]} and len(needs.launches) == 1


def test_localize_points_paths_at_local_files(tmp_path):
    model, data = verl_scripts.local_assets(tmp_path)
    (tmp_path / "rewards.py").touch()
    out = verl_scripts.localize(["actor_rollout_ref.model.path=Qwen/Qwen3-8B", "data.train_files=['a', 'b']",
                                 "data.val_files=x.parquet", "custom_reward_function.path=rewards.py",
                                 "+reward.reward_model.model_path=rm", "--config-path=config", "trainer.n_gpus_per_node=8"],
                                tmp_path, model, data)
    assert out == [f"actor_rollout_ref.model.path={model}", f"data.train_files=[{data}]", f"data.val_files={data}",
                   f"custom_reward_function.path={tmp_path / 'rewards.py'}", f"+reward.reward_model.model_path={model}",
                   "--config-path=config", "trainer.n_gpus_per_node=8"]


def test_report_classifies_every_script(checkout, tmp_path, capsys):
    verl, recipe = checkout
    out = tmp_path / "report.json"
    level = logging.getLogger("hybridrl").level
    verl_scripts.main([str(verl), "--recipe", str(recipe), "--name", "stand-in", "--out", str(out)])
    assert logging.getLogger("hybridrl").level == level  # the loader's lines are quieted only while it runs
    report = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == {k: v for k, v in report.items() if k not in ("results", "keys")}
    status = {r["script"]: r["status"] for r in report["results"]}
    assert status == {
        "examples/grpo/run_broken.sh": "not_extracted", "examples/grpo/run_megatron.sh": "refused_by_name",
        "examples/grpo/run_needs_env.sh": "passed", "examples/grpo/run_pass.sh": "passed",
        "examples/grpo/run_typo.sh": "failed", "examples/grpo/run_wandb.sh": "needs_package",
        "recipe/dapo/run_dapo.sh": "refused_by_name"}
    assert (report["scripts"], report["passed"], report["pass_rate"]) == (7, 2, round(2 / 7, 4))
    assert report["keys"]["trainer.n_gpus"] == {"scripts": 1, "unknown": 1}
    assert ["actor_rollout_ref.model.use_liger", 1] in report["top_refused_keys"]
    dapo = next(r for r in report["results"] if r["script"] == "recipe/dapo/run_dapo.sh")
    assert any("Liger kernels are not implemented" in reason for reason in dapo["reasons"])
