"""The non-finite accounting of an update: which quantity of a skipped optimizer step was non-finite first.

`TrainState.step` skips the optimizer step when the gradient norm is not finite (as verl does), so one bad
mini-batch costs one step, not the weights. An update records, per optimizer step, whether each quantity of
its chain was finite (`NonFiniteTrace`: the forward's log-probs or values, each loss term, the total loss) and
reports how many of its optimizer steps were skipped and, for those, the first non-finite quantity
(`SkippedSteps.metrics`: `<role>/num_skipped_steps`, `<role>/nonfinite/<quantity>`; `grad_norm` when every
recorded quantity was finite and only the backward overflowed). The trainer's `NonFiniteGuard` reads them.

The flags stay on the device (one `isfinite(...).all()` per quantity and micro-batch, no synchronisation);
they reach the host only for a skipped step, whose gradient-norm check has synchronised already.
"""

from __future__ import annotations

import warnings

import torch


class NonFiniteTrace:
    """Finite-or-not flags of one optimizer step's quantities, in the order they were first noted (the chain)."""

    def __init__(self) -> None:
        self._finite: dict[str, torch.Tensor] = {}

    def note(self, quantity: str, value: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Record whether `value` is finite (where `mask`, same shape, is set); ANDed over micro-batches."""
        finite = torch.isfinite(value.detach())
        if mask is not None:
            finite = finite | ~mask.bool()
        flag = finite.all()
        previous = self._finite.get(quantity)
        self._finite[quantity] = flag if previous is None else previous & flag

    @property
    def quantities(self) -> list[str]:
        """The quantities noted, in chain order."""
        return list(self._finite)

    def first_nonfinite(self) -> str | None:
        """The first noted quantity that was not finite, or None (one host transfer)."""
        if not self._finite:
            return None
        flags = torch.stack(list(self._finite.values())).tolist()
        return next((quantity for quantity, finite in zip(self._finite, flags) if not finite), None)


class SkippedSteps:
    """One update's optimizer steps skipped for a non-finite gradient norm, by first non-finite quantity."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.count = 0
        self.by_quantity: dict[str, int] = {}  # every quantity the skipped steps noted (0 where never first)

    def record(self, grad_norm: torch.Tensor, trace: NonFiniteTrace) -> None:
        """After `TrainState.step` returned `grad_norm`: count the step if it was skipped."""
        if bool(torch.isfinite(grad_norm)):
            return
        self.count += 1
        for quantity in [*trace.quantities, "grad_norm"]:
            self.by_quantity.setdefault(quantity, 0)
        quantity = trace.first_nonfinite() or "grad_norm"
        self.by_quantity[quantity] += 1

    def metrics(self) -> dict[str, float]:
        """`<role>/num_skipped_steps` (always) and, after a skipped step, `<role>/nonfinite/<quantity>` for every
        quantity of the chain, zeros included. The gradient norm is global (FSDP's, or of gradients averaged over
        replicas), so every rank skips the same steps and reports the same keys, which the group's reduce requires
        (`distributed.worker_group.reduce_rank_metrics`), although the first non-finite quantity may differ by
        rank: a NaN in one rank's micro-batch is that rank's `log_prob`, the others' `grad_norm`."""
        out = {f"{self.role}/num_skipped_steps": float(self.count)}
        out.update({f"{self.role}/nonfinite/{quantity}": float(n) for quantity, n in self.by_quantity.items()})
        return out

    def step_scheduler(self, lr_scheduler: torch.optim.lr_scheduler.LRScheduler) -> None:
        """The LR schedule advances every update, skipped optimizer steps or not (as verl); torch's warning that
        the scheduler stepped before the optimizer did would only repeat, misleadingly, what the metrics say."""
        with warnings.catch_warnings():
            if self.count:
                warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)` before")
            lr_scheduler.step()
