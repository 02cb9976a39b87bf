"""verl's generative reward model keys (`reward_model.rollout.*` with a custom reward function): what maps onto the
served engine, what must be 1, what is named as having no effect, and verl's reward pool accepted with a notice."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from hybridrl.config import ConfigError, load_config
from hybridrl.config.cli import main_print_config
from hybridrl.config.dynamic_sampling_rules import filter_groups_problems
from hybridrl.config.genrm import GenRMSettings, genrm_settings, is_genrm

SCRIPTS = Path(__file__).resolve().parent / "verl_scripts"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from verl_script_capture import capture_script  # noqa: E402
from verl_scripts import local_assets, localize  # noqa: E402

FAPO = ["reward_model.enable=True", "reward_model.enable_resource_pool=True", "reward_model.n_gpus_per_node=8",
        "reward_model.nnodes=2", "reward_model.model.path=/m/genrm", "reward_model.rollout.name=sglang",
        "reward_model.rollout.gpu_memory_utilization=0.95", "reward_model.rollout.tensor_model_parallel_size=1",
        "reward_model.rollout.free_cache_engine=False", "custom_reward_function.path=/x/reward_fn_reasoning.py",
        "custom_reward_function.name=compute_score_fapo"]


def messages(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_fapo_keys_map_onto_the_served_engine(caplog):
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        cfg = load_config(FAPO)
    assert is_genrm(cfg.reward_model, cfg.custom_reward_function.path)
    settings = genrm_settings(cfg.reward_model.rollout)
    assert settings == GenRMSettings(gpu_memory_utilization=0.95, free_cache_engine=False)
    told = messages(caplog)
    assert any("reward_model.rollout.name=sglang: the generative reward model is served by hybridrl's own engine"
               in line and "Mapped: gpu_memory_utilization, free_cache_engine" in line for line in told)
    assert any(line.startswith("reward_model.enable_resource_pool=True: no separate Ray resource pool is built")
               and "reward_model.device_ids" in line for line in told)


def test_without_a_custom_function_the_reward_model_stays_discriminative(caplog):
    rm = [key for key in FAPO if not key.startswith("custom_reward_function")]
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        cfg = load_config(rm)
    assert not is_genrm(cfg.reward_model, cfg.custom_reward_function.path)
    assert any("the reward model runs in process" in line for line in messages(caplog))
    assert not is_genrm(load_config(FAPO[1:]).reward_model, "/x/reward_fn_reasoning.py")  # enable=False


def test_verl_reward_loop_defaults_when_nothing_is_set():
    cfg = load_config(["reward_model.enable=True", "reward_model.rollout.name=vllm", "custom_reward_function.path=/f.py"])
    settings = genrm_settings(cfg.reward_model.rollout)
    assert (settings.gpu_memory_utilization, settings.free_cache_engine, settings.max_model_len) == (0.5, True, None)
    assert (settings.max_num_seqs, settings.enforce_eager, settings.dtype) == (1024, True, "bfloat16")


@pytest.mark.parametrize(("override", "phrase"), [
    ("reward_model.rollout.tensor_model_parallel_size=2",
     "reward_model.rollout.tensor_model_parallel_size=2: each engine replica of the generative reward model runs on "
     "one device here (one replica per GPU of reward_model.device_ids, or one on the controller's device); set "
     "reward_model.rollout.tensor_model_parallel_size=1"),
    ("+reward_model.rollout.data_parallel_size=4", "set reward_model.rollout.data_parallel_size=1"),
    ("reward_model.rollout.gpu_memory_utilization=1.5", "gpu_memory_utilization=1.5 must be in (0, 1]"),
    ("+reward_model.rollout.max_model_len=0", "reward_model.rollout.max_model_len=0 must be a whole number >= 1"),
    ("reward_model.rollout.free_cache_engine=maybe", "free_cache_engine='maybe' must be true or false"),
    ("+reward_model.rollout.skip_tokenizer_init=True", "the GenRM server tokenizes text and chat messages"),
    ("reward_model.rollout.name=tgi", "reward_model.rollout.name='tgi' is not an engine name"),
])
def test_what_the_served_engine_cannot_be_is_refused_by_name(override, phrase):
    with pytest.raises(ConfigError) as error:
        load_config(FAPO + [override])
    assert phrase in str(error.value)


def test_engine_options_without_a_counterpart_are_named_once(caplog):
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        load_config(FAPO + ["+reward_model.rollout.load_format=dummy", "+reward_model.rollout.enable_chunked_prefill=True",
                            "+reward_model.rollout.max_model_len=4096"])
    lines = [line for line in messages(caplog) if "have no effect on hybridrl's engine" in line]
    assert lines == ["reward_model.rollout: enable_chunked_prefill, load_format have no effect on hybridrl's engine "
                     "(they configure sglang itself; its context is max_model_len, null: the model's "
                     "max_position_embeddings, as in verl)"]


def test_resource_pool_alone_is_a_notice_not_a_refusal(caplog):
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        load_config(["reward_model.enable_resource_pool=True"])
    assert any("reward_model.enable_resource_pool=True" in line for line in messages(caplog))


def test_dynamic_sampling_on_the_functions_extra_info_is_allowed_with_a_genrm():
    groups = ["algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=acc"]
    assert filter_groups_problems(load_config(FAPO + groups)) == []
    discriminative = load_config([key for key in FAPO if not key.startswith("custom_reward_function")] + groups)
    assert any("a reward model gives one score per response" in problem
               for problem in filter_groups_problems(discriminative))


def test_fapo_32b_validates_with_its_sequence_parallelism(tmp_path, capsys):
    """recipe_fapo_32b.sh validates as written (sp_size=8: 32 ranks / 8 = data-parallel size 4) on the 4 nodes its
    fsdp_size=32 is written for."""
    args = capture_script(SCRIPTS / "recipe_fapo_32b.sh", SCRIPTS, env={"NNODES": "4"}).launches[0]
    assert "actor_rollout_ref.actor.ulysses_sequence_parallel_size=8" in args
    code = main_print_config(["--validate", "--device", "cuda", *localize(args, SCRIPTS, *local_assets(tmp_path))])
    assert code == 0, capsys.readouterr().err


def test_august_spelling_is_the_same_genrm(caplog):
    """verl's August tree: reward.reward_model.* and reward.custom_reward_function.* (its own GenRM test's keys)."""
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        cfg = load_config(["reward.reward_model.enable=True", "reward.reward_model.model_path=/m/genrm",
                           "reward.reward_model.rollout.name=vllm", "reward.reward_model.rollout.gpu_memory_utilization=0.9",
                           "reward.reward_model.rollout.tensor_model_parallel_size=1",
                           "+reward.reward_model.rollout.prompt_length=2048",
                           "reward.custom_reward_function.path=/x/reward_fn.py",
                           "reward.custom_reward_function.name=compute_score_gsm8k"])
    assert is_genrm(cfg.reward_model, cfg.custom_reward_function.path) and cfg.reward_model.model.path == "/m/genrm"
    assert genrm_settings(cfg.reward_model.rollout).gpu_memory_utilization == 0.9
