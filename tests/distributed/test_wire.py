"""The launcher's pipe format: CPU tensors as out-of-band buffers, everything else as pickle does it."""

import multiprocessing as mp
import pickle
import threading

import pytest
import torch

from hybridrl.distributed import wire
from hybridrl.utils.batch import Batch


def test_tensors_of_every_common_dtype_and_layout_round_trip_writable():
    values = {
        "f32": torch.randn(3, 4), "bf16": torch.randn(5).bfloat16(), "i64": torch.arange(6).view(2, 3),
        "bool": torch.tensor([True, False]), "scalar": torch.tensor(2.5), "empty": torch.empty(0, 7),
        "strided": torch.arange(20.0).view(4, 5).t(), "u8": torch.arange(4, dtype=torch.uint8),
    }
    back = wire.loads(wire.dumps(values))
    for name, tensor in values.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name
    back["f32"].add_(1.0)  # writable, and no longer tied to the sender's tensor
    torch.testing.assert_close(back["f32"], values["f32"] + 1.0)


def test_a_batch_with_meta_and_strings_round_trips():
    batch = Batch({"input_ids": torch.arange(6).view(3, 2)}, non_tensors={"uid": ["a", "b", "c"]},
                  meta={"temperature": 0.7})
    back = wire.loads(wire.dumps(("generate_sequences", (batch,), {"n": 1})))
    method, (got,), kwargs = back
    assert method == "generate_sequences" and kwargs == {"n": 1}
    assert torch.equal(got["input_ids"], batch["input_ids"]) and list(got.non_tensors["uid"]) == ["a", "b", "c"]
    assert got.meta == {"temperature": 0.7}


def test_tensors_outside_the_fast_path_pickle_as_torch_does():
    parameter = torch.nn.Parameter(torch.randn(2))
    needs_grad = torch.randn(2, requires_grad=True)
    back = wire.loads(wire.dumps({"p": parameter, "g": needs_grad, "none": None}))
    assert isinstance(back["p"], torch.nn.Parameter) and torch.equal(back["p"], parameter)
    assert back["g"].requires_grad and torch.equal(back["g"], needs_grad) and back["none"] is None


def test_tensor_bytes_travel_outside_the_pickle_stream():
    tensor = torch.randn(1000)
    frame = wire.dumps(tensor)
    assert len(frame) < len(pickle.dumps(tensor, protocol=5))  # no torch.save wrapper around the storage
    header_and_pickle = len(frame) - tensor.numel() * 4
    assert header_and_pickle < 300  # the 4000 bytes are the out-of-band buffer, not pickled


def test_a_frame_larger_than_the_pipe_buffer_crosses_a_real_pipe_into_writable_tensors():
    parent, child = mp.Pipe(duplex=True)
    batch = Batch({"input_ids": torch.arange(512 * 415).view(512, 415), "lp": torch.randn(512, 256)},
                  meta={"step": 3})
    shard = batch.chunk(2)[1]  # a view of rows 256.. of a larger tensor
    writer = threading.Thread(target=wire.send, args=(parent, wire.encode(("ref", (shard,), {}))))
    writer.start()
    method, (got,), _ = wire.recv(child)  # ~1.3 MB: many pipe-buffer fills, read into one buffer
    writer.join()
    assert method == "ref" and got.meta == {"step": 3}
    assert torch.equal(got["input_ids"], batch["input_ids"][256:]) and torch.equal(got["lp"], batch["lp"][256:])
    got["lp"].zero_()  # writable, and the sender's batch is untouched
    assert batch["lp"][256:].abs().sum() > 0
    child.close()
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        wire.send(parent, wire.encode("x" * 10))


def test_recv_says_when_the_other_end_closed_mid_frame():
    parent, child = mp.Pipe(duplex=True)
    frame = wire.encode(torch.randn(100))
    wire._write_all(parent.fileno(), memoryview(wire._COUNT.pack(sum(part.nbytes for part in frame))))
    wire._write_all(parent.fileno(), frame[0])  # the header only, then the sender goes away
    parent.close()
    with pytest.raises(EOFError, match="closed the pipe after"):
        wire.recv(child)
