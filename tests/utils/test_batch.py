import numpy as np
import pytest
import torch

from hybridrl.utils.batch import Batch


def make(n=4):
    return Batch({"x": torch.arange(n)}, {"uid": [f"u{i}" for i in range(n)]}, {"temperature": 1.0})


def test_repeat_interleave_and_tile():
    b = make(2)
    assert b.repeat(2)["x"].tolist() == [0, 0, 1, 1]
    assert b.repeat(2, interleave=False)["x"].tolist() == [0, 1, 0, 1]
    assert list(b.repeat(2)["uid"]) == ["u0", "u0", "u1", "u1"]


def test_chunk_concat_roundtrip_and_errors():
    b = make(6)
    parts = b.chunk(3)
    assert [len(p) for p in parts] == [2, 2, 2]
    back = Batch.concat(parts)
    assert back["x"].tolist() == list(range(6)) and list(back["uid"]) == list(b["uid"])
    assert parts[1]["x"].data_ptr() == b["x"][2:].data_ptr()  # row views: shards are not copied
    with pytest.raises(ValueError, match="4 equal chunks"):
        b.chunk(4)


def test_pad_unpad():
    b = make(5)
    padded, num = b.pad_to_multiple(4)
    assert num == 3 and len(padded) == 8 and padded["x"].tolist()[5:] == [0, 1, 2]
    assert padded.unpad(num)["x"].tolist() == list(range(5))


def test_mismatched_rows_rejected():
    with pytest.raises(ValueError, match="disagree"):
        Batch({"x": torch.zeros(3)}, {"uid": ["a"]})
    b = make(3)
    with pytest.raises(ValueError, match="rows"):
        b["y"] = torch.zeros(2)


def test_index_with_bool_and_select_union():
    b = make(4)
    sub = b.index(torch.tensor([True, False, True, False]))
    assert sub["x"].tolist() == [0, 2] and list(sub["uid"]) == ["u0", "u2"]
    u = b.select(["x"]).union(Batch({"y": torch.ones(4)}))
    assert set(u.tensors) == {"x", "y"} and isinstance(b["uid"], np.ndarray)
