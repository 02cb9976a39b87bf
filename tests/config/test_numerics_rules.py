"""Rules of actor_rollout_ref.model.batch_invariant: each refusal names the key to change."""

from __future__ import annotations

import pytest

from hybridrl.config import load_config
from hybridrl.config.errors import ConfigError
from hybridrl.config.notices import config_notices
from hybridrl.config.numerics_rules import batch_invariant_problems
from hybridrl.config.validate import validate_config

ON = "actor_rollout_ref.model.batch_invariant=true"
CUDA = "trainer.device=cuda"
VALID = ["actor_rollout_ref.actor.use_dynamic_bsz=true", "critic.use_dynamic_bsz=true",
         "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true"]


def test_the_mode_is_off_by_default_and_valid_on_cuda_with_the_engine():
    assert load_config([]).actor_rollout_ref.model.batch_invariant is False
    assert batch_invariant_problems(load_config([ON, CUDA])) == []
    validate_config(load_config([ON, CUDA, *VALID]))


@pytest.mark.parametrize("override,match", [
    ("trainer.device=cpu", "trainer.device='cpu': the kernels run on CUDA GPUs; set trainer.device=cuda"),
    ("actor_rollout_ref.model.fp32_residual_stream=false", "set it to true"),
    ("actor_rollout_ref.rollout.name=hf", "only the hybrid engine runs the shared kernels"),
    ("actor_rollout_ref.rollout.tensor_model_parallel_size=2", "tensor_model_parallel_size=2: .*set it to 1"),
    ("actor_rollout_ref.model.lora_rank=8", "lora_rank=8: .*set lora_rank=0"),
    ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "ulysses_sequence_parallel_size=2"),
])
def test_what_the_shared_kernels_cannot_do_is_refused_by_name(override, match):
    problems = batch_invariant_problems(load_config([ON, CUDA, override]))
    assert len(problems) == 1 and problems[0].startswith("actor_rollout_ref.model.batch_invariant=true does not")
    with pytest.raises(ConfigError, match=match):
        validate_config(load_config([ON, CUDA, override, *VALID]))


def test_torch_compile_is_not_applied_and_says_so():
    from hybridrl.workers.trainable import RoleSpec

    cfg = load_config([ON, CUDA, "actor_rollout_ref.actor.use_torch_compile=true"])
    notices = [n for n in config_notices(cfg) if "batch_invariant" in n]
    assert len(notices) == 1 and "actor_rollout_ref.actor.use_torch_compile" in notices[0]
    assert not RoleSpec.actor(cfg).compile and not RoleSpec.reference(cfg).compile
    plain = load_config([CUDA, "actor_rollout_ref.actor.use_torch_compile=true"])
    assert RoleSpec.actor(plain).compile and not [n for n in config_notices(plain) if "batch_invariant" in n]
