"""temporarily: a setting changed inside a block and restored after it, also when the block raises."""

from __future__ import annotations

import pytest
import torch

from hybridrl.utils.scoped import temporarily


def test_the_setting_is_restored_after_the_block_and_after_an_exception():
    before = torch.get_default_dtype()
    with temporarily(torch.get_default_dtype, torch.set_default_dtype, torch.float64):
        assert torch.empty(1).dtype == torch.float64
    assert torch.get_default_dtype() == before
    with pytest.raises(RuntimeError), temporarily(torch.get_default_dtype, torch.set_default_dtype, torch.float16):
        raise RuntimeError("inside")
    assert torch.get_default_dtype() == before
