"""The update's non-finite accounting: the first non-finite quantity of a skipped optimizer step, masked
positions ignored, and metric keys that every rank of a group reports alike."""

from __future__ import annotations

import math

import torch

from hybridrl.distributed.worker_group import reduce_rank_metrics
from hybridrl.trainer.guards.nonfinite import first_nonfinite
from hybridrl.workers.nonfinite import NonFiniteTrace, SkippedSteps

NAN = torch.tensor(math.nan)


def trace_of(log_prob: torch.Tensor, mask: torch.Tensor, loss: torch.Tensor) -> NonFiniteTrace:
    trace = NonFiniteTrace()
    trace.note("log_prob", log_prob, mask)
    trace.note("pg_loss", loss)
    trace.note("loss", loss)
    return trace


def test_the_first_quantity_in_chain_order_is_named_and_masked_positions_do_not_count():
    mask = torch.tensor([[1, 1, 0]])
    padded_nan = torch.tensor([[-0.5, -1.0, math.nan]])  # NaN under the mask: padding, never trained on
    assert trace_of(padded_nan, mask, torch.tensor(0.3)).first_nonfinite() is None
    assert trace_of(padded_nan, mask, NAN).first_nonfinite() == "pg_loss"
    assert trace_of(torch.tensor([[-0.5, math.inf, 0.0]]), mask, NAN).first_nonfinite() == "log_prob"


def test_notes_of_micro_batches_are_anded():
    trace = NonFiniteTrace()
    trace.note("loss", torch.tensor(1.0))
    trace.note("loss", NAN)
    trace.note("loss", torch.tensor(2.0))
    assert trace.first_nonfinite() == "loss"


def test_finite_steps_report_only_the_count():
    skipped = SkippedSteps("actor")
    skipped.record(torch.tensor(1.5), trace_of(torch.zeros(1, 2), torch.ones(1, 2), NAN))  # stepped
    assert skipped.metrics() == {"actor/num_skipped_steps": 0.0}


def test_ranks_that_disagree_on_the_first_quantity_report_the_same_keys():
    """A NaN in rank 0's micro-batch: rank 0's log-probs, rank 1's only its (all-reduced) gradient norm. The group
    pools both; the earliest quantity of the chain is the one named."""
    mask = torch.ones(1, 2)
    rank0, rank1 = SkippedSteps("actor"), SkippedSteps("actor")
    rank0.record(NAN, trace_of(torch.tensor([[math.nan, -1.0]]), mask, NAN))
    rank1.record(NAN, trace_of(torch.tensor([[-0.2, -1.0]]), mask, torch.tensor(0.4)))
    assert rank0.metrics().keys() == rank1.metrics().keys()
    pooled = reduce_rank_metrics([rank0.metrics(), rank1.metrics()], "actor", "update_actor")
    assert pooled == {"actor/num_skipped_steps": 1.0, "actor/nonfinite/log_prob": 0.5,
                      "actor/nonfinite/pg_loss": 0.0, "actor/nonfinite/loss": 0.0, "actor/nonfinite/grad_norm": 0.5}
    assert first_nonfinite(pooled).metric == "actor/nonfinite/log_prob"
