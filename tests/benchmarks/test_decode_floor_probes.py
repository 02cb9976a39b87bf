"""benchmarks/decode_floor_probes.py: the split-K GEMM's partials sum to the product (Triton interpreter on
CPU, or CUDA), and the stream probe's decode inputs share each prompt's blocks within a group of rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # `benchmarks` is a directory of scripts, not an installed package

from benchmarks import decode_floor_probes as probes  # noqa: E402
from tests.triton_interpreter import DEVICES, on_device, run_interpreted  # noqa: E402


@pytest.mark.slow  # a child interpreter runs the kernel under TRITON_INTERPRET=1 (~10 s on 2 cores)
def test_interpreted_splitk_gemm():
    run_interpreted(__file__, min_passed=3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("split", [1, 3, 4])
def test_splitk_partials_sum_to_the_product(device, split):
    device = on_device(device)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    x, w = torch.randn(40, 200, device=device, dtype=dtype), torch.randn(70, 200, device=device, dtype=dtype)
    partials = probes.splitk_gemm(x, w, (32, 32, 32), split, stages=2)
    assert partials.shape == (probes.splits(200, 32, split)[1], 40, 70) and partials.dtype == torch.float32
    torch.testing.assert_close(partials.sum(0), x.float() @ w.float().T, rtol=1e-3, atol=1e-2)


def test_splits_cover_k_in_block_multiples():
    assert probes.splits(4864, 128, 4) == (1280, 4)  # 1216 rounded up to whole blocks
    assert probes.splits(896, 64, 8) == (128, 7)  # the last split would be empty: 7 are launched
    assert probes.splits(200, 32, 1) == (224, 1)


def test_shared_prompt_inputs_give_each_group_one_prompt_and_each_row_its_own_tail():
    (ids, positions, tables, context, slots), next_block = probes.shared_prompt_inputs(16, first_block=1)
    shared = probes.PROMPT // probes.BLOCK
    own = -(-(probes.CONTEXT - shared * probes.BLOCK) // probes.BLOCK)
    assert tables.shape == (16, shared + own) and ids.shape == positions.shape == (16,)
    assert torch.equal(tables[0, :shared], tables[7, :shared])  # rows 0-7: one prompt
    assert not torch.equal(tables[0, :shared], tables[8, :shared])
    tails = tables[:, shared:].flatten().tolist()
    assert len(set(tails)) == len(tails) and 0 not in tables.flatten().tolist()  # no row reads another's tail
    assert next_block == 1 + 2 * shared + len(tails) == int(tables.max()) + 1
    assert (context == probes.CONTEXT).all() and (positions == probes.CONTEXT - 1).all()
    last = positions // probes.BLOCK
    assert torch.equal(slots // probes.BLOCK, tables[torch.arange(16), last].long())  # the new token: the row's block
