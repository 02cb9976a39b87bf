"""Where the served GenRM runs and how long a request may be (workers/genrm.py)."""

from __future__ import annotations

import pytest
import torch

from hybridrl.config import ConfigError, load_config
from hybridrl.workers.genrm import FALLBACK_CONTEXT, context_length, genrm_devices


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
