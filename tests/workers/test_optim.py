"""build_optimizer follows verl's optim.optimizer_impl / optim.optimizer / override_optimizer_config."""

from __future__ import annotations

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.workers.optim import build_optimizer


def optim_cfg(*overrides: str):
    return load_config([f"actor_rollout_ref.actor.optim.{o}" for o in overrides]).actor_rollout_ref.actor.optim


def params():
    frozen = torch.nn.Parameter(torch.zeros(2), requires_grad=False)
    return [torch.nn.Parameter(torch.ones(3)), frozen]


def test_default_is_adamw_with_the_configured_hyperparameters():
    opt = build_optimizer(params(), optim_cfg("lr=3e-6", "weight_decay=0.1", "betas=[0.8,0.95]"))
    assert type(opt) is torch.optim.AdamW
    group = opt.param_groups[0]
    assert (group["lr"], group["weight_decay"], group["betas"]) == (3e-6, 0.1, (0.8, 0.95))
    assert len(group["params"]) == 1  # frozen parameters are left out


def test_adamw_on_host_parameters_is_fused_only_when_it_steps_there_under_the_offload_policy():
    """FSDP2's CPUOffloadPolicy steps the optimizer on the CPU: the fused CPU kernel instead of torch's loop, and
    the same update; a plain CPU run keeps torch's default; override_optimizer_config still wins."""
    plain = build_optimizer(params(), optim_cfg())
    host = build_optimizer(params(), optim_cfg(), steps_on_host=True)
    overridden = build_optimizer(params(), optim_cfg("override_optimizer_config={foreach: true}"), steps_on_host=True)
    assert [opt.defaults["fused"] for opt in (plain, host, overridden)] == [None, True, None]
    for opt in (plain, host):
        param = opt.param_groups[0]["params"][0]
        param.grad = torch.full((3,), 0.5)
        opt.step()
    torch.testing.assert_close(host.param_groups[0]["params"][0], plain.param_groups[0]["params"][0])


def test_any_optimizer_class_by_module_and_name_with_overrides():
    opt = build_optimizer(params(), optim_cfg("optimizer=SGD", "lr=0.5", "override_optimizer_config={momentum: 0.9}"))
    assert type(opt) is torch.optim.SGD
    assert opt.param_groups[0]["momentum"] == 0.9 and "betas" not in opt.param_groups[0]  # betas: Adam family only
    p = opt.param_groups[0]["params"][0]
    p.grad = torch.ones(3)
    opt.step()
    torch.testing.assert_close(p.detach(), torch.full((3,), 0.5 - 0.5 * 0.01 * 1))  # lr * (grad + wd * p)


def test_unknown_module_class_or_arguments_name_the_key_to_change():
    with pytest.raises(ValueError, match="optimizer_impl='no_such_optim_lib' cannot be imported"):
        build_optimizer(params(), optim_cfg("optimizer_impl=no_such_optim_lib"))
    with pytest.raises(ValueError, match="'AdamWW' is not an optimizer class in torch.optim; available: .*AdamW"):
        build_optimizer(params(), optim_cfg("optimizer=AdamWW"))
    with pytest.raises(ValueError, match="LBFGS.*rejected its arguments.*override_optimizer_config"):
        build_optimizer(params(), optim_cfg("optimizer=LBFGS"))  # LBFGS takes no weight_decay
