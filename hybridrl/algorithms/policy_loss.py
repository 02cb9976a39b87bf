"""The policy-loss table keyed by `actor.policy_loss.loss_mode`, with verl's registry API
(`register_policy_loss`, `get_policy_loss_fn`; verl/trainer/ppo/core_algos.py).

Every loss has verl's signature

    fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights)
        -> (pg_loss, metrics)

with `(B, T)` tensors, `config` an ActorLossSettings (verl's ActorConfig names: `config.clip_ratio_low`,
`config.policy_loss.clip_cov_ratio`, `config.get("clip_ratio_c", 3.0)`, `**config.global_batch_info`) and
metrics under their logged names (`actor/pg_clipfrac`, ...). A loss written for verl therefore registers
here unchanged but for its imports:

    from hybridrl.algorithms import agg_loss, register_policy_loss

    @register_policy_loss("my_loss")
    def my_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
                rollout_is_weights=None):
        ...

(a module named in VERL_USE_EXTERNAL_MODULES is imported before the first lookup). Losses that always
aggregate one way whatever `actor.loss_agg_mode` says carry that mode here (`agg_mode`), because the
actor weights each micro-batch's loss by its share of the mini-batch under that mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from hybridrl.algorithms import cov_losses, dppo_losses, pg_losses, ppo_losses
from hybridrl.algorithms.aggregate import LOSS_AGG_MODES
from hybridrl.algorithms.bypass_loss import compute_policy_loss_bypass_mode
from hybridrl.utils.external_modules import import_external_modules

PolicyLossFn = Callable[..., tuple[torch.Tensor, Mapping[str, torch.Tensor | float]]]


@dataclass(frozen=True)
class PolicyLossSpec:
    fn: PolicyLossFn
    agg_mode: str | None = None  # the aggregation it always uses; None = actor.loss_agg_mode


_SEQ_MEAN = "seq-mean-token-mean"
POLICY_LOSSES: dict[str, PolicyLossSpec] = {
    "vanilla": PolicyLossSpec(ppo_losses.compute_policy_loss_vanilla),
    "gspo": PolicyLossSpec(ppo_losses.compute_policy_loss_gspo, agg_mode=_SEQ_MEAN),
    "sapo": PolicyLossSpec(ppo_losses.compute_policy_loss_sapo, agg_mode=_SEQ_MEAN),
    "cispo": PolicyLossSpec(ppo_losses.compute_policy_loss_cispo),
    # the mean over sequences of per-sequence losses: weighted by sequences like any seq-mean mode
    "geo_mean": PolicyLossSpec(ppo_losses.compute_policy_loss_geo_mean, agg_mode="seq-mean-token-sum"),
    "dppo_tv": PolicyLossSpec(dppo_losses.compute_policy_loss_dppo_tv),
    "dppo_kl": PolicyLossSpec(dppo_losses.compute_policy_loss_dppo_kl),
    "gpg": PolicyLossSpec(pg_losses.compute_policy_loss_gpg),
    "dro": PolicyLossSpec(pg_losses.compute_policy_loss_dro),
    "clip_cov": PolicyLossSpec(cov_losses.compute_policy_loss_clip_cov),
    "kl_cov": PolicyLossSpec(cov_losses.compute_policy_loss_kl_cov),
    "bypass_mode": PolicyLossSpec(compute_policy_loss_bypass_mode),
}
BUILTIN_POLICY_LOSSES = tuple(POLICY_LOSSES)


def register_policy_loss(name: str, *, agg_mode: str | None = None) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: make `fn` the loss of `actor.policy_loss.loss_mode=<name>` (verl's decorator). `agg_mode`:
    the one aggregation the loss uses whatever loss_agg_mode says, if it fixes one. Another function under
    a taken name raises (verl silently replaces, which would hide a built-in)."""
    if agg_mode is not None and agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"register_policy_loss({name!r}, agg_mode={agg_mode!r}): choose one of {list(LOSS_AGG_MODES)}")

    def decorator(fn: PolicyLossFn) -> PolicyLossFn:
        existing = POLICY_LOSSES.get(name)
        if existing is not None and existing.fn is not fn:
            raise ValueError(f"policy loss {name!r} is already registered ({existing.fn.__module__}."
                             f"{existing.fn.__qualname__}); register yours under another name")
        POLICY_LOSSES[name] = PolicyLossSpec(fn, agg_mode)
        return fn

    return decorator


def get_policy_loss_spec(loss_mode: str) -> PolicyLossSpec:
    """The spec of `actor.policy_loss.loss_mode`; unknown → ValueError listing the registered modes."""
    if loss_mode not in POLICY_LOSSES:
        import_external_modules()
    if loss_mode not in POLICY_LOSSES:
        raise ValueError(
            f"actor.policy_loss.loss_mode={loss_mode!r} is not supported; choose one of {sorted(POLICY_LOSSES)} "
            "(or register yours with @register_policy_loss in a module named in VERL_USE_EXTERNAL_MODULES)")
    return POLICY_LOSSES[loss_mode]


def get_policy_loss_fn(loss_mode: str) -> PolicyLossFn:
    """verl's lookup: the loss function of `actor.policy_loss.loss_mode`."""
    return get_policy_loss_spec(loss_mode).fn


def policy_agg_mode(loss_mode: str, loss_agg_mode: str) -> str:
    """How `loss_mode`'s policy loss is really aggregated (what its micro-batch weight must follow)."""
    return get_policy_loss_spec(loss_mode).agg_mode or loss_agg_mode
