"""Known user errors print their message and exit without a traceback (HYDRA_FULL_ERROR=1 adds it), and
`print-config --validate` finds missing paths and unusable rows before any run starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hybridrl.cli import main as cli_main
from hybridrl.data.parquet import write_parquet


@pytest.fixture
def run_args(arithmetic_files, arith_model_dir, tmp_path) -> list[str]:
    train, test = arithmetic_files
    return ["algorithm.adv_estimator=grpo", f"data.train_files={train}", f"data.val_files={test}",
            "data.train_batch_size=4",
            "data.max_prompt_length=8", "data.max_response_length=4", f"actor_rollout_ref.model.path={arith_model_dir}",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "trainer.device=cpu", "trainer.total_training_steps=1", "trainer.save_freq=-1", "trainer.test_freq=-1",
            "trainer.logger=['file']", f"trainer.default_local_dir={tmp_path / 'run'}"]


def train(args: list[str], capsys, monkeypatch, full_error: bool = False) -> tuple[int, str, str]:
    if full_error:
        monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    else:
        monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    code = cli_main(["train", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_missing_data_and_reward_files_are_named_together(run_args, capsys, monkeypatch, tmp_path):
    args = run_args + [f"data.train_files={tmp_path / 'nope.parquet'}", f"custom_reward_function.path={tmp_path / 'r.py'}"]
    code, _, err = train(args, capsys, monkeypatch)
    assert code == 2 and "Traceback" not in err
    assert f"data.train_files='{tmp_path / 'nope.parquet'}': no such file" in err
    assert f"custom_reward_function.path='{tmp_path / 'r.py'}': no such file" in err


def test_overlong_prompt_stops_before_the_first_step(run_args, capsys, monkeypatch, tmp_path):
    code, out, err = train(run_args + ["data.max_prompt_length=3"], capsys, monkeypatch)
    assert code == 1 and "Traceback" not in err and "HYDRA_FULL_ERROR=1" in err
    assert "DatasetError" in err and "longer than data.max_prompt_length=3" in err
    assert "data.filter_overlong_prompts=True" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()  # no step ran
    code, _, err = train(run_args + ["data.max_prompt_length=3"], capsys, monkeypatch, full_error=True)
    assert code == 1 and "Traceback" in err  # verl's opt-in


def test_rows_without_ground_truth_stop_before_the_first_step(run_args, capsys, monkeypatch, tmp_path):
    rows = [{"data_source": "arithmetic", "prompt": [{"role": "user", "content": "1+1="}],
             "reward_model": {"style": "rule", "ground_truth": None if i == 3 else "2"}} for i in range(8)]
    path = write_parquet(rows, tmp_path / "no_truth.parquet")
    code, _, err = train(run_args + [f"data.train_files={path}"], capsys, monkeypatch)
    assert code == 1 and "1 of 8 rows without reward_model.ground_truth" in err and "row 3" in err


def test_ray_not_installed_is_an_install_hint(run_args, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as on a machine without it
    code, _, err = train(run_args + ["trainer.launcher=ray"], capsys, monkeypatch)
    assert code == 1 and "Traceback" not in err
    assert "MissingDependencyError" in err and "pip install 'hybridrl[ray]'" in err


def test_validate_scans_the_data_and_checks_paths(run_args, capsys):
    assert cli_main(["print-config", "--validate", *run_args]) == 0
    err = capsys.readouterr().err
    assert "validated train data: 64 rows" in err and "validated val data: 16 rows" in err
    assert cli_main(["print-config", "--validate", *run_args, "data.max_prompt_length=3"]) == 2
    err = capsys.readouterr().err
    assert "DatasetError" in err and "of 64 prompts longer than data.max_prompt_length=3" in err
    assert cli_main(["print-config", "--validate", *run_args, "actor_rollout_ref.model.path=/no/model"]) == 2
    assert "actor_rollout_ref.model.path='/no/model': no such directory" in capsys.readouterr().err


def test_validate_builds_a_user_dataset_class_as_train_does(run_args, capsys):
    classes = Path(__file__).resolve().parent / "data" / "user_classes" / "verl_style.py"
    user_class = [f"data.custom_cls.path={classes}", "data.custom_cls.name=RawPromptDataset"]
    assert cli_main(["print-config", "--validate", *run_args, *user_class]) == 0
    err = capsys.readouterr().err
    assert "validated train data: 64 rows from data.custom_cls RawPromptDataset" in err
    assert cli_main(["print-config", "--validate", *run_args, f"data.custom_cls.path={classes}",
                     "data.custom_cls.name=NoGroundTruthDataset"]) == 2
    err = capsys.readouterr().err
    assert "data.custom_cls NoGroundTruthDataset" in err and "ground_truth" in err
