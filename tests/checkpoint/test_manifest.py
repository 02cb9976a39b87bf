"""checkpoint/manifest.py: the checksum, and the checks a resume makes with the manifest."""

from __future__ import annotations

import pytest
import torch

from hybridrl.checkpoint.errors import CheckpointError
from hybridrl.checkpoint.manifest import describe_tensors, tensor_checksum, verify_read, verify_restored


def test_checksum_is_exact_and_sees_one_changed_bit():
    t = torch.randn(1001)  # 4004 bytes: 500 words and 4 bytes over
    changed = t.clone()
    changed[1000] = torch.nextafter(changed[1000], torch.tensor(1e9))  # the last element, in the odd bytes
    assert tensor_checksum(t) != tensor_checksum(changed)
    assert tensor_checksum(t) == tensor_checksum(t.clone()) == tensor_checksum(t[0:].contiguous())
    assert tensor_checksum(t[1:]) == tensor_checksum(t[1:].clone())  # a view off an 8-byte boundary
    assert tensor_checksum(torch.zeros(0)) == "0000000000000000"
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = tensor_checksum(torch.ones(1 << 20))
    finally:
        torch.set_num_threads(threads)
    assert single == tensor_checksum(torch.ones(1 << 20))  # the same whatever the thread count


def test_checksum_by_hand():
    # int64 words 1, 2 and -1 sum to 2; the float32 1.0 is 0x3f800000 on its own (4 odd bytes, summed bytewise)
    assert tensor_checksum(torch.tensor([1, 2, -1])) == f"{2:016x}"
    assert tensor_checksum(torch.tensor([1.0])) == f"{0x00 + 0x00 + 0x80 + 0x3f:016x}"


def test_verify_read_names_the_file_and_the_tensors():
    saved = {"a": torch.ones(2), "b": torch.zeros(3)}
    expected = describe_tensors(saved)
    verify_read("x.safetensors", expected, saved)
    damaged = {"a": torch.tensor([1.0, 2.0]), "c": torch.zeros(3)}
    with pytest.raises(CheckpointError) as caught:
        verify_read("x.safetensors", expected, damaged)
    message = str(caught.value)
    assert "x.safetensors does not hold what its manifest lists (3 of 2 tensors" in message
    assert "b is missing" in message and "c is not in the checkpoint" in message
    assert "a: values differ from the saved ones" in message


def test_verify_restored_points_at_a_restore_that_did_not_take_and_at_a_dtype_change():
    expected = describe_tensors({"w": torch.ones(4)})
    with pytest.raises(CheckpointError, match=r"the model does not hold the saved weights \(1 of 1 tensors: w: values "
                                              r"differ.*for instance the initial ones"):
        verify_restored("run/global_step_2/actor", expected, {"w": torch.zeros(4)})
    with pytest.raises(CheckpointError, match=r"w: dtype bfloat16 where float32 was saved.*fsdp_config.model_dtype"):
        verify_restored("run/global_step_2/actor", expected, {"w": torch.ones(4).bfloat16()})
