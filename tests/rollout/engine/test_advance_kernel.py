"""The Triton record-and-advance kernel vs the torch code it replaces on CUDA (`decode_step.record_and_advance`).

Run in a TRITON_INTERPRET=1 subprocess on CPU (tests/test_triton_on_cpu.py); integers only, so exact."""

from __future__ import annotations

import pytest
import torch

from hybridrl.rollout.engine import decode_step
from tests.triton_interpreter import DEVICES, on_device


def burst_state(batch: int, device: str, block_size: int = 4, width: int = 6, seed: int = 0) -> dict:
    """A burst's static buffers mid-way: rows at, below and past their limits, some at the table's last column."""
    gen = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, block_size * width, (batch,), generator=gen)
    limits = positions + torch.randint(-1, 3, (batch,), generator=gen)  # -1/0: frozen, 1/2: advances
    state = dict(
        tokens=torch.randint(0, 1000, (batch,), generator=gen), logprobs=-torch.rand(batch, generator=gen),
        out_tokens=torch.zeros(batch, 5, dtype=torch.int64), out_logprobs=torch.zeros(batch, 5),
        input_ids=torch.zeros(batch, dtype=torch.int64), positions=positions,
        block_tables=torch.randint(1, 500, (batch, width), generator=gen, dtype=torch.int32),
        context_lens=(positions + 1).to(torch.int32), slot_mapping=torch.full((batch,), -5, dtype=torch.int64),
        limits=limits, steps=torch.randint(0, 100, (batch,), generator=gen))
    return {k: v.to(device) for k, v in state.items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("advance", [True, False])
@pytest.mark.parametrize("batch", [1, 7, 300])  # 300: more than one program of rows
def test_kernel_records_and_advances_like_the_torch_code(device, advance, batch):
    from hybridrl.rollout.engine.advance_kernel import record_and_advance

    device = on_device(device)
    want, got = burst_state(batch, "cpu"), burst_state(batch, device)
    decode_step.record_and_advance(**want, column=3, block_size=4, advance=advance)
    record_and_advance(**got, column=3, block_size=4, advance=advance)
    for name, tensor in want.items():
        assert torch.equal(got[name].cpu(), tensor), name
    assert want["out_tokens"][:, 3].tolist() == want["tokens"].tolist()
    moved = want["positions"] != burst_state(batch, "cpu")["positions"]
    assert moved.any() == advance
    if batch > 1 and advance:
        assert not moved.all()  # the case holds rows at their limits too
