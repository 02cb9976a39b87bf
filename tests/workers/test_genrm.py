"""Where the served GenRM runs and how long a request may be (workers/genrm.py)."""

from __future__ import annotations

import pytest
import torch

from hybridrl.config import ConfigError, load_config
from hybridrl.config.genrm import GenRMSettings
from hybridrl.workers.genrm import FALLBACK_CONTEXT, cache_follows_the_phase, context_length, genrm_devices


def test_context_is_max_model_len_else_the_models_positions():
    assert context_length(None, 32768) == 32768
    assert context_length(4096, 32768) == 4096
    assert context_length(None, None) == FALLBACK_CONTEXT
    with pytest.raises(ConfigError, match="max_model_len=65536 is more than the reward model's 32768 positions"):
        context_length(65536, 32768)


def test_one_replica_per_listed_gpu_else_one_on_the_controllers_device():
    listed = load_config(["reward_model.enable=True", "reward_model.device_ids=[3,4]"])
    unlisted = load_config(["reward_model.enable=True"])
    assert genrm_devices(listed, torch.device("cuda", 1)) == [torch.device("cuda", 3), torch.device("cuda", 4)]
    assert genrm_devices(unlisted, torch.device("cuda", 1)) == [torch.device("cuda", 1)]
    assert genrm_devices(listed, torch.device("cpu")) == [torch.device("cpu")]


def test_a_kept_cache_on_a_training_gpu_is_freed_after_scoring_with_a_warning(caplog):
    """FAPO's free_cache_engine=False assumes GPUs of the GenRM's own (verl's resource pool): kept on GPUs the
    training roles use, the cache would hold its share of the device through the update."""
    kept = GenRMSettings(free_cache_engine=False, gpu_memory_utilization=0.95)
    cfg = load_config(["reward_model.enable=True", "trainer.n_gpus_per_node=2"])
    with caplog.at_level("WARNING", logger="hybridrl"):
        shared = cache_follows_the_phase(kept, [torch.device("cuda", 1)], cfg)
    assert shared.free_cache_engine and shared.gpu_memory_utilization == 0.95
    assert "shares GPU(s) [1] with training" in caplog.text and "reward_model.device_ids" in caplog.text
    own = cache_follows_the_phase(kept, [torch.device("cuda", 2)], cfg)  # GPUs 0-1 train
    assert own == kept
    assert cache_follows_the_phase(kept, [torch.device("cpu")], cfg) == kept  # the hf backend on CPU has no cache
