"""print-config output, the checked-in reference config, and the schema's own invariants."""

from __future__ import annotations

from pathlib import Path

from hybridrl.config import load_config
from hybridrl.config.cli import main_print_config
from hybridrl.config.index import default_tree, schema_index
from hybridrl.config.interpolation import resolve_tree
from hybridrl.config.index import config_tree
from hybridrl.config.schema import HybridRLConfig

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference_config.yaml"


def test_reference_config_is_current(capsys):
    assert main_print_config([]) == 0
    assert capsys.readouterr().out == REFERENCE.read_text(), (
        "docs/reference_config.yaml is stale; regenerate it: python -m hybridrl.config.cli > docs/reference_config.yaml"
    )


def test_print_config_with_overrides_and_docs(capsys):
    assert main_print_config(["data.train_batch_size=8"]) == 0
    assert "  train_batch_size: 8\n" in capsys.readouterr().out
    assert main_print_config(["--docs"]) == 0
    out = capsys.readouterr().out
    assert "actor_rollout_ref.rollout.prompt_length: 512  # Prompt tokens (left-padded). (default ${data.max_prompt_length})" in out


def test_print_config_errors_go_to_stderr(capsys):
    assert main_print_config(["actor_rollout_ref.rollout.name=lmdeploy"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "hybridrl ships its own rollout engine" in captured.err
    assert main_print_config(["--validate"]) == 2  # the defaults leave the micro batch sizes unset, as verl's do
    assert "set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in capsys.readouterr().err


QUICKSTART_GRPO = [
    "algorithm.adv_estimator=grpo", "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
    "trainer.device=cpu",
]


def existing_inputs(root: Path) -> list[str]:
    """Data and model paths that exist (--validate also checks every input path; data/ tests scan real rows)."""
    (root / "model").mkdir()
    for name in ("train.parquet", "test.parquet"):
        (root / name).touch()
    return [f"data.train_files={root / 'train.parquet'}", f"data.val_files={root / 'test.parquet'}",
            f"actor_rollout_ref.model.path={root / 'model'}"]


def test_validate_runs_the_checks_train_runs_before_loading(capsys, tmp_path):
    """The placement, launcher and device-count checks, not only the value rules: what train refuses."""
    assert main_print_config(["--validate", *QUICKSTART_GRPO, "trainer.n_gpus_per_node=2",
                              *existing_inputs(tmp_path)]) == 0
    capsys.readouterr()
    assert main_print_config(["--validate", *QUICKSTART_GRPO, "trainer.n_gpus_per_node=2",
                              "actor_rollout_ref.actor.device_ids=[0,5]"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert ("actor_rollout_ref.actor.device_ids=[0, 5] names rank 5 outside 0..1: the run has 2 ranks "
            "(trainer.n_gpus_per_node=2); set trainer.n_gpus_per_node=6") in captured.err
    assert main_print_config(["--validate", *QUICKSTART_GRPO, "trainer.n_gpus_per_node=0"]) == 2
    assert "trainer.n_gpus_per_node (0) must be >= 1" in capsys.readouterr().err
    assert main_print_config(["--validate", *QUICKSTART_GRPO, "trainer.launcher=local", "trainer.nnodes=2"]) == 2
    assert "trainer.launcher=local runs on one node" in capsys.readouterr().err


def test_every_key_has_a_doc_line():
    missing = [spec.path for spec in schema_index().values() if not spec.doc or "\n" in spec.doc]
    assert missing == []


def test_interpolated_defaults_match_the_dataclass_defaults():
    # each `${...}` default, resolved against untouched defaults, equals the concrete dataclass default
    assert resolve_tree(default_tree()) == config_tree(HybridRLConfig())


def test_top_level_keys_are_frozen():
    assert list(config_tree(load_config())) == [
        "data", "actor_rollout_ref", "critic", "reward_model", "reward_manager", "custom_reward_function",
        "algorithm", "trainer", "ray_kwargs", "global_profiler", "transfer_queue", "model_engine", "distillation", "skip",
    ]  # fmt: skip


def test_hybridrl_deviations_from_verl_defaults():
    cfg = load_config()
    assert cfg.actor_rollout_ref.rollout.name == "auto" and cfg.trainer.device == "auto"
    assert cfg.trainer.n_gpus_per_node is None and cfg.trainer.logger == ["console", "file"]
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2" and cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert (cfg.trainer.seed, cfg.reward_model.on_error, cfg.trainer.launcher, cfg.actor_rollout_ref.rollout.block_size) == (
        42, "raise", "auto", 16
    )


def test_config_doc_lists_every_not_implemented_key():
    from hybridrl.config.compat import NOT_IMPLEMENTED

    doc = (REFERENCE.parent / "config.md").read_text()
    missing = [key for key in NOT_IMPLEMENTED if f"`{key}`" not in doc]
    assert missing == [], "add these keys to the not-implemented table of docs/config.md"
