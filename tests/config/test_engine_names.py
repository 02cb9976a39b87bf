"""verl's engine names and engine options read as settings of hybridrl's own engine."""

from __future__ import annotations

import logging

import pytest

from hybridrl.config import ConfigError, load_config, rollout_backend_name


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_external_engine_names_run_our_engine_like_auto(engine, caplog):
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        cfg = load_config([f"actor_rollout_ref.rollout.name={engine}"])
    assert cfg.actor_rollout_ref.rollout.name == "auto"
    assert (rollout_backend_name(cfg, "cuda"), rollout_backend_name(cfg, "cpu")) == ("hybrid", "hf")
    lines = [r.getMessage() for r in caplog.records if "runs hybridrl's own engine" in r.getMessage()]
    assert lines == [f"actor_rollout_ref.rollout.name={engine}: runs hybridrl's own engine, as name=auto does "
                     f"(hybrid on GPU, hf on CPU); {engine}'s settings apply where hybridrl's engine has them "
                     "(docs/config.md)"]


def test_unknown_engine_name_is_refused_with_the_names_that_work():
    with pytest.raises(ConfigError) as err:
        load_config(["actor_rollout_ref.rollout.name=lmdeploy"])
    assert str(err.value).startswith("actor_rollout_ref.rollout.name='lmdeploy': hybridrl ships its own rollout engine")


def test_vllm_options_with_a_counterpart_set_the_engine_key(caplog):
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        cfg = load_config([
            "actor_rollout_ref.rollout.name=vllm",
            "+actor_rollout_ref.rollout.engine_kwargs.vllm.compilation_config.cudagraph_capture_sizes=[1,8,64]",
            "+actor_rollout_ref.rollout.engine_kwargs.vllm.compilation_config.cudagraph_mode=NONE",
            "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_model_len=4096",
            "+actor_rollout_ref.rollout.engine_kwargs.vllm.disable_mm_preprocessor_cache=True",
            "+actor_rollout_ref.rollout.engine_kwargs.sglang.disable_radix_cache=True",  # not the named engine
        ])
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.cudagraph_capture_sizes == [1, 8, 64] and rollout.enforce_eager is True
    assert rollout.max_model_len == 4096 and rollout.enable_prefix_caching is True
    assert any("engine_kwargs.vllm: disable_mm_preprocessor_cache configure vllm itself and have no effect"
               in r.getMessage() for r in caplog.records)


def test_sglang_options_map_too():
    cfg = load_config(["actor_rollout_ref.rollout.name=sglang",
                       "+actor_rollout_ref.rollout.engine_kwargs.sglang.disable_radix_cache=True",
                       "+actor_rollout_ref.rollout.engine_kwargs.sglang.chunked_prefill_size=4096",
                       "+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=flashinfer"])
    assert cfg.actor_rollout_ref.rollout.enable_prefix_caching is False
    assert cfg.actor_rollout_ref.rollout.max_num_batched_tokens == 4096


def test_engine_option_and_key_set_differently_is_an_error():
    with pytest.raises(ConfigError, match="engine_kwargs.vllm.max_model_len=4096 means actor_rollout_ref.rollout"
                                          ".max_model_len=4096, but actor_rollout_ref.rollout.max_model_len=2048"):
        load_config(["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.max_model_len=2048",
                     "+actor_rollout_ref.rollout.engine_kwargs.vllm.max_model_len=4096"])


def test_fp8_kv_cache_is_refused_by_name():
    with pytest.raises(ConfigError, match="fp8 KV cache is not implemented"):
        load_config(["actor_rollout_ref.rollout.name=vllm", "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype=fp8"])


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_both_rollout_modes_accepted(mode):
    assert load_config([f"actor_rollout_ref.rollout.mode={mode}"]).actor_rollout_ref.rollout.mode == mode


def test_reward_model_served_by_an_engine_runs_in_process(caplog):
    rm = ["reward_model.enable=True", "reward_model.model.path=/m/rm", "reward_model.rollout.name=vllm",
          "reward_model.rollout.gpu_memory_utilization=0.8", "reward_model.rollout.tensor_model_parallel_size=1"]
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        cfg = load_config(rm)
    assert cfg.reward_model.enable and cfg.reward_model.rollout["gpu_memory_utilization"] == 0.8
    assert any("reward_model.rollout.name=vllm: the reward model runs in process" in r.getMessage() for r in caplog.records)
    with caplog.at_level(logging.INFO, logger="hybridrl"):
        load_config(rm + ["custom_reward_function.path=/x/genrm.py"])  # a generative one: tests/config/test_genrm.py
    assert any("the generative reward model is served by hybridrl's own engine" in r.getMessage()
               for r in caplog.records)
