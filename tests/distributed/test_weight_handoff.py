"""The shared-memory weight buffer: layout, casting, reuse, the spill when it does not fit, and cleanup."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from hybridrl.distributed.weight_handoff import (
    BufferSpec,
    PickledWeights,
    WeightManifest,
    map_weights,
    new_buffer_path,
    sweep_stale_buffers,
    write_weights,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def weights() -> dict[str, torch.Tensor]:
    """Odd sizes (unaligned ends), a scalar, an empty tensor, a transposed (non-contiguous) view, an int."""
    gen = torch.Generator().manual_seed(0)
    return {"embed.weight": torch.randn(7, 5, generator=gen), "norm.weight": torch.randn(3, generator=gen),
            "scale": torch.tensor(1.2345), "empty": torch.zeros(0, 4),
            "proj.weight": torch.randn(6, 4, generator=gen).t(), "steps": torch.arange(5)}


def cast(tensors: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}


@pytest.fixture
def buffer_path(tmp_path):
    """A buffer in a private directory (tmp_path), so tests never depend on what else is in /dev/shm."""
    return new_buffer_path(str(tmp_path))


def assert_equal_exactly(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        assert torch.equal(got[name], want[name]), name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_views_equal_the_weights_cast_to_the_rollout_dtype(buffer_path, dtype):
    manifest = write_weights(weights().items(), BufferSpec(buffer_path, dtype))
    assert isinstance(manifest, WeightManifest) and os.path.getsize(buffer_path) == manifest.nbytes
    want = {k: v.to(dtype) if v.is_floating_point() else v for k, v in weights().items()}
    assert_equal_exactly(map_weights(manifest), want)
    assert all(e.offset % 64 == 0 for e in manifest.entries)  # every tensor on a cache line
    pickled = PickledWeights(want)  # the other form of a handoff: the tensors themselves
    assert manifest.shared and not pickled.shared and pickled.nbytes == sum(t.nbytes for t in want.values())
    assert_equal_exactly(dict(pickled.open()), want)


def test_manifest_round_trips(buffer_path):
    manifest = write_weights(weights().items(), BufferSpec(buffer_path, torch.bfloat16))
    assert WeightManifest.from_dict(json.loads(json.dumps(manifest.to_dict()))) == manifest
    assert pickle.loads(pickle.dumps(manifest)) == manifest
    assert len(pickle.dumps(manifest)) < 2048  # what crosses the pipe: no tensor payload
    assert_equal_exactly(dict(WeightManifest.from_dict(manifest.to_dict()).open()),
                         cast(weights(), torch.bfloat16))


def test_the_buffer_is_rewritten_in_place_and_shrinks_with_the_layout(buffer_path):
    first = write_weights(weights().items(), BufferSpec(buffer_path, torch.bfloat16))
    inode = os.stat(buffer_path).st_ino
    doubled = {k: v * 2 for k, v in weights().items()}
    second = write_weights(doubled.items(), BufferSpec(buffer_path, torch.bfloat16, expected_bytes=first.nbytes))
    assert second == WeightManifest(buffer_path, first.nbytes, first.entries)  # same layout, same file
    assert os.stat(buffer_path).st_ino == inode
    assert_equal_exactly(map_weights(second), cast(doubled, torch.bfloat16))
    third = write_weights([("norm.weight", torch.ones(3))], BufferSpec(buffer_path, torch.bfloat16))
    assert os.path.getsize(buffer_path) == third.nbytes == 6


def test_readers_map_the_buffer_shared_and_read_only_and_keep_the_mapping(buffer_path):
    """Read-only: a stray write through a view crashes its process instead of changing what others load.
    Kept: the next rewrite in place is seen through the same mapping (no page faults on every step)."""
    manifest = write_weights(weights().items(), BufferSpec(buffer_path, None))
    first = map_weights(manifest)
    with open("/proc/self/maps") as maps:
        modes = {line.split()[1] for line in maps if line.rstrip().endswith(buffer_path)}
    assert "r--s" in modes and not any("w" in mode for mode in modes - {"rw-s"})  # rw-s: the writer's own
    write_weights({k: v + 1 for k, v in weights().items()}.items(), BufferSpec(buffer_path, None))
    assert map_weights(manifest)["norm.weight"].data_ptr() == first["norm.weight"].data_ptr()
    assert torch.equal(first["norm.weight"], weights()["norm.weight"] + 1)


def test_a_buffer_over_the_limit_spills_every_tensor_and_says_how_much_was_needed(buffer_path):
    gathered = []

    def gather():  # stands for the collective gather: every tensor must still be consumed
        for item in weights().items():
            gathered.append(item[0])
            yield item

    result = write_weights(gather(), BufferSpec(buffer_path, torch.bfloat16, max_bytes=100))
    assert isinstance(result, PickledWeights) and gathered == list(weights())
    assert_equal_exactly(result.tensors, cast(weights(), torch.bfloat16))
    full = write_weights(weights().items(), BufferSpec(buffer_path, torch.bfloat16))
    assert result.needed_bytes == full.nbytes
    assert f"the weights need {full.nbytes} B of shared memory but only 100 B are available" in result.reason
    assert "capped by a limit of 100 B" in result.reason


def test_a_buffer_known_too_big_is_not_written_again(buffer_path):
    result = write_weights(weights().items(), BufferSpec(buffer_path, None, max_bytes=100, expected_bytes=10_000))
    assert isinstance(result, PickledWeights) and not os.path.exists(buffer_path)
    assert_equal_exactly(result.tensors, weights())


def test_spilled_tensors_never_share_the_callers_storage(buffer_path):
    source = weights()
    result = write_weights(source.items(), BufferSpec(buffer_path, None, max_bytes=0))
    source["norm.weight"].add_(1.0)  # the actor's next optimizer step
    assert not torch.equal(result.tensors["norm.weight"], source["norm.weight"])


def test_a_missing_buffer_names_the_likely_causes(buffer_path):
    manifest = write_weights(weights().items(), BufferSpec(buffer_path, None))
    os.unlink(buffer_path)
    with pytest.raises(FileNotFoundError, match="removed .the trainer shut down.. or this process is on another node"):
        map_weights(manifest)


def test_sweep_removes_only_buffers_of_processes_that_are_gone(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    namespace = os.path.basename(new_buffer_path(str(tmp_path))).split("-")[2]
    stale = tmp_path / f"hybridrl-weights-{namespace}-{int(dead.stdout)}-abc"
    live = tmp_path / f"hybridrl-weights-{namespace}-{os.getpid()}-abc"
    elsewhere = tmp_path / f"hybridrl-weights-{int(namespace) + 1}-{int(dead.stdout)}-abc"  # another container's
    for path in (stale, live, elsewhere):
        path.write_bytes(b"x")
    assert sweep_stale_buffers(str(tmp_path)) == [str(stale)]
    assert live.exists() and elsewhere.exists() and not stale.exists()


def test_a_writer_removes_its_buffer_when_its_interpreter_exits(buffer_path):
    script = textwrap.dedent(f"""
        import torch
        from hybridrl.distributed.weight_handoff import BufferSpec, write_weights
        write_weights([("w", torch.ones(1000))], BufferSpec({buffer_path!r}, torch.bfloat16))
        assert __import__("os").path.getsize({buffer_path!r}) == 2000
    """)
    subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO)
    assert not os.path.exists(buffer_path)


def test_tied_weights_are_written_once_and_freed_addresses_are_never_taken_for_ties(buffer_path):
    embed = torch.randn(10, 4)
    state = {"embed_tokens.weight": embed.detach(), "norm.weight": torch.ones(4), "lm_head.weight": embed.detach()}
    manifest = write_weights(state.items(), BufferSpec(buffer_path, torch.bfloat16))
    offsets = {e.name: e.offset for e in manifest.entries}
    assert offsets["lm_head.weight"] == offsets["embed_tokens.weight"] and manifest.nbytes == 128 + 8
    assert_equal_exactly(map_weights(manifest), cast(state, torch.bfloat16))

    def gathered():  # each tensor freed before the next is made: the allocator may hand out the same address
        for i in range(6):
            yield f"layer{i}.weight", torch.full((64,), float(i))

    manifest = write_weights(gathered(), BufferSpec(buffer_path, None))
    assert len({e.offset for e in manifest.entries}) == 6
    assert_equal_exactly(map_weights(manifest), dict(gathered()))


def test_the_writers_remove_the_buffer_when_the_controller_is_killed(tmp_path):
    """The controller (which removes the buffer at shutdown) dies by SIGKILL: its worker ranks see the pipe
    close, exit, and the writer removes the buffer on its way out."""
    path = new_buffer_path(str(tmp_path))
    script = textwrap.dedent(f"""
        import os, signal, torch
        from hybridrl.distributed import LocalWorkerGroup
        from hybridrl.distributed.weight_handoff import BufferSpec
        from tests.distributed.toy_workers import ToyWorker
        if __name__ == "__main__":
            group = LocalWorkerGroup(ToyWorker, {{}}, world_size=2, role="actor")
            group.call_all("write_weights", BufferSpec({path!r}, torch.bfloat16))
            assert os.path.getsize({path!r}) == 2000
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    script_path = tmp_path / "controller.py"
    script_path.write_text(script)
    proc = subprocess.run([sys.executable, str(script_path)], cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == -9
    deadline = time.monotonic() + 60
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(path)
