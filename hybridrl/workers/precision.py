"""Master-weight, compute and gradient-reduce dtypes of a role: verl's FSDP mixed precision.

- master weights (what the optimizer updates): `fsdp_config.model_dtype` (verl default fp32, for the
  reference too);
- compute: `fsdp_config.mixed_precision.param_dtype` if set, else `fsdp_config.dtype` (bfloat16);
- gradient reduction: `fsdp_config.mixed_precision.reduce_dtype`, default fp32.
`mixed_precision.buffer_dtype` is checked by name only: buffers (e.g. rotary frequencies) keep the dtype
they load in, as under verl's FSDP2 (whose MixedPrecisionPolicy has no buffer dtype).

Under FSDP2 the sharded model is cast by FSDP2 (MixedPrecisionPolicy(param_dtype=compute,
reduce_dtype=reduce)); a whole model (one device, replicas) runs its forwards under
`torch.autocast(device, compute)` (`workers.parallel`). Either way the parameters,
their gradients and the optimizer state stay in the master dtype, so small updates (lr 1e-6) are not
rounded away, and log-probs/values come out fp32 (the workers cast them).

CPU: bf16 autocast on CPU is slower than fp32 for the models trained there and only adds rounding,
so on CPU the compute dtype stays the master dtype unless `mixed_precision.param_dtype` is set
explicitly. Each role logs its choice once, with the reason.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from hybridrl.config.errors import ConfigError
from hybridrl.config.precision import canonical_dtype
from hybridrl.logging.log import get_logger
from hybridrl.utils.collectives import is_rank0

log = get_logger("workers.precision")


@dataclass(frozen=True)
class Precision:
    master: torch.dtype
    compute: torch.dtype
    reduce: torch.dtype
    device_type: str
    why: str  # where the compute dtype came from (for the log line)

    @property
    def mixed(self) -> bool:
        return self.compute != self.master

    @property
    def fsdp_param_dtype(self) -> torch.dtype | None:
        """FSDP2's param_dtype: None computes in the parameters' own dtype."""
        return self.compute if self.mixed else None

    def autocast(self) -> contextlib.AbstractContextManager:
        """Around a forward of a whole model (`parallel.SingleDevice`, `Replicas`); FSDP2 casts a sharded model
        itself (`parallel.FullyShardedStrategy.autocast`)."""
        if not self.mixed:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.compute)

    def describe(self, trains: bool = True) -> str:
        """`trains`: the role has gradients (the reference does not: no reduce dtype to report)."""
        weights = f"{'master ' if trains else ''}weights {_name(self.master)}"
        reduce = f", gradient reduce {_name(self.reduce)}" if trains else ""
        return f"{weights}, compute {_name(self.compute)} ({self.why}){reduce}"


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype(value, key: str) -> torch.dtype:
    return getattr(torch, canonical_dtype(value, key))


def resolve_precision(fsdp_cfg, device: torch.device | str, prefix: str) -> Precision:
    """The role's precision from its `fsdp_config` (at config key `prefix`) on `device`."""
    device_type = torch.device(device).type
    mixed = fsdp_cfg.mixed_precision or {}
    master = _dtype(fsdp_cfg.model_dtype, f"{prefix}.model_dtype")
    reduce = _dtype(mixed.get("reduce_dtype") or "fp32", f"{prefix}.mixed_precision.reduce_dtype")
    if mixed.get("buffer_dtype") is not None:
        _dtype(mixed["buffer_dtype"], f"{prefix}.mixed_precision.buffer_dtype")
    if mixed.get("param_dtype") is not None:
        compute_key = f"{prefix}.mixed_precision.param_dtype"
        compute, why = _dtype(mixed["param_dtype"], compute_key), compute_key
    elif device_type == "cpu":
        compute_key = f"{prefix}.model_dtype"
        compute = master
        why = (f"on CPU the master dtype: bf16 autocast there is slow; set {prefix}.mixed_precision.param_dtype "
               "to force another")
    else:
        compute_key = f"{prefix}.dtype"
        compute, why = _dtype(fsdp_cfg.dtype, compute_key), compute_key
    if compute.itemsize > master.itemsize:
        raise ConfigError(
            f"{compute_key} asks for {_name(compute)} compute but {prefix}.model_dtype={fsdp_cfg.model_dtype!r} keeps "
            f"the weights in {_name(master)}; compute cannot be wider than the master weights: set "
            f"{prefix}.model_dtype=fp32 (fp32 master weights) or {compute_key}=bf16")
    return Precision(master, compute, reduce, device_type, why)


def log_precision(role: str, precision: Precision, trains: bool = True) -> None:
    """Every rank of a role resolves the same precision: rank 0 logs it."""
    if is_rank0():
        log.info("%s: %s", role, precision.describe(trains))
