"""Mixed precision with fp32 master weights (verl's fsdp_config.model_dtype / dtype / mixed_precision)."""

from __future__ import annotations

import logging

import pytest
import torch

from hybridrl.config import ConfigError, load_config
from hybridrl.workers.parallel import FullyShardedStrategy, SingleDevice
from hybridrl.workers.precision import resolve_precision
from tests.workers.helpers import build_actor, ragged_batch

ACTOR = "actor_rollout_ref.actor.fsdp_config"


def actor_fsdp(extra: list[str] = ()):
    return load_config(list(extra)).actor_rollout_ref.actor.fsdp_config


def test_gpu_defaults_are_fp32_master_bf16_compute_fp32_reduce():
    precision = resolve_precision(actor_fsdp(), torch.device("cuda"), ACTOR)
    assert (precision.master, precision.compute, precision.reduce) == (torch.float32, torch.bfloat16, torch.float32)
    assert precision.mixed and precision.fsdp_param_dtype == torch.bfloat16
    assert f"compute bfloat16 ({ACTOR}.dtype)" in precision.describe()


def test_verl_reference_and_critic_defaults_match_the_actor():
    cfg = load_config()
    for fsdp, prefix in ((cfg.actor_rollout_ref.ref.fsdp_config, "actor_rollout_ref.ref.fsdp_config"),
                         (cfg.critic.model.fsdp_config, "critic.model.fsdp_config")):
        precision = resolve_precision(fsdp, "cuda", prefix)
        assert (precision.master, precision.compute) == (torch.float32, torch.bfloat16)  # verl: model_dtype fp32


def test_cpu_computes_in_the_master_dtype_unless_param_dtype_is_set():
    cpu = resolve_precision(actor_fsdp(), "cpu", ACTOR)
    assert cpu.compute == torch.float32 and not cpu.mixed and cpu.fsdp_param_dtype is None
    assert "bf16 autocast there is slow" in cpu.describe()
    forced = resolve_precision(actor_fsdp([f"{ACTOR}.mixed_precision={{param_dtype:bf16,reduce_dtype:fp16}}"]), "cpu",
                               ACTOR)
    assert (forced.compute, forced.reduce) == (torch.bfloat16, torch.float16)
    assert isinstance(forced.autocast(), torch.autocast)
    sharded = FullyShardedStrategy(torch.nn.Linear(1, 1), forced)
    assert not isinstance(sharded.autocast(), torch.autocast)  # FSDP2 casts a sharded model itself
    assert isinstance(SingleDevice(torch.nn.Linear(1, 1), forced).autocast(), torch.autocast)


def test_param_dtype_overrides_dtype_and_bf16_master_computes_bf16():
    precision = resolve_precision(actor_fsdp([f"{ACTOR}.dtype=float16", f"{ACTOR}.mixed_precision.param_dtype=fp32"]),
                                  "cuda", ACTOR)
    assert precision.compute == torch.float32 and not precision.mixed
    bf16 = resolve_precision(actor_fsdp([f"{ACTOR}.model_dtype=bf16"]), "cuda", ACTOR)
    assert (bf16.master, bf16.compute, bf16.mixed) == (torch.bfloat16, torch.bfloat16, False)


@pytest.mark.parametrize("extra, message", [
    ([f"{ACTOR}.model_dtype=fp8"], f"{ACTOR}.model_dtype='fp8' is not a dtype; use one of fp32, float32"),
    ([f"{ACTOR}.mixed_precision.reduce_dtype=half"], f"{ACTOR}.mixed_precision.reduce_dtype='half' is not a dtype"),
    ([f"{ACTOR}.model_dtype=bf16", f"{ACTOR}.dtype=fp32"],
     f"compute cannot be wider than the master weights: set {ACTOR}.model_dtype=fp32"),
])
def test_bad_dtypes_name_the_key_and_the_fix(extra, message):
    with pytest.raises(ConfigError, match=message):
        resolve_precision(actor_fsdp(extra), "cuda", ACTOR)


def lr_update_kept(model_dir: str, model_dtype: str) -> tuple[float, torch.nn.Module, list[torch.dtype]]:
    """Fraction of one weight matrix changed by an lr=1e-6 update, the actor, and the q_proj output dtypes."""
    actor = build_actor(model_dir, [f"{ACTOR}.model_dtype={model_dtype}", f"{ACTOR}.mixed_precision.param_dtype=bf16",
                                    "actor_rollout_ref.actor.optim.lr=1e-6"])
    weight = actor.model.model.layers[0].self_attn.q_proj.weight
    seen: list[torch.dtype] = []
    actor.model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    batch = ragged_batch(num_rows=8, seed=1)
    batch["old_log_probs"] = actor.compute_log_prob(batch)["old_log_probs"]
    before = weight.detach().clone()
    actor.update_actor(batch)
    return (weight.detach() != before).float().mean().item(), actor, seen


def test_fp32_master_weights_keep_a_tiny_update_that_bf16_master_weights_lose(tiny_model_dir, caplog):
    with caplog.at_level(logging.INFO):
        changed, actor, seen = lr_update_kept(tiny_model_dir, "fp32")
    assert f"actor: master weights float32, compute bfloat16 ({ACTOR}.mixed_precision.param_dtype)" in caplog.text
    assert all(p.dtype == torch.float32 for p in actor.model.parameters())
    assert all(p.grad.dtype == torch.float32 for p in actor.model.parameters() if p.grad is not None)
    assert seen and set(seen) == {torch.bfloat16}  # log-prob and update forwards ran in bf16
    assert changed > 0.9
    lost, bf16_actor, _ = lr_update_kept(tiny_model_dir, "bf16")
    assert bf16_actor.model.dtype == torch.bfloat16
    assert lost < 0.05  # 1e-6 steps vanish below bf16's resolution (~4e-3 relative)


def test_log_probs_come_out_fp32_under_bf16_compute(tiny_model_dir):
    actor = build_actor(tiny_model_dir, [f"{ACTOR}.mixed_precision.param_dtype=bf16"])
    out = actor.compute_log_prob(ragged_batch(num_rows=4, seed=2))
    assert out["old_log_probs"].dtype == torch.float32 and out["entropys"].dtype == torch.float32


def test_a_role_without_gradients_reports_no_gradient_reduce():
    precision = resolve_precision(load_config([]).actor_rollout_ref.ref.fsdp_config, "cpu",
                                  "actor_rollout_ref.ref.fsdp_config")
    assert "gradient reduce" in precision.describe() and "master weights" in precision.describe()
    assert "gradient reduce" not in precision.describe(trains=False)
    assert precision.describe(trains=False).startswith("weights float32")
