"""CUDAGraphDecodeRunner: size bucketing, padding and slicing through the eager fallback; capture on GPU."""

from __future__ import annotations

import contextlib
import logging

import pytest
import torch

from hybridrl.rollout.engine import cuda_graph
from hybridrl.rollout.engine.cuda_graph import CUDAGraphDecodeRunner, default_capture_sizes


class RecordingDecode:
    """A decode_fn whose (B, 5) output echoes each row's inputs, so tests can see the padding."""

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []
        self.slot_mappings: list[torch.Tensor] = []  # of every call: which ones would write the KV cache
        self.last: tuple[torch.Tensor, ...] = ()

    def __call__(self, input_ids, positions, block_tables, context_lens, slot_mapping):
        self.batch_sizes.append(input_ids.shape[0])
        self.slot_mappings.append(slot_mapping.clone())
        self.last = tuple(t.clone() for t in (input_ids, positions, block_tables, context_lens, slot_mapping))
        return torch.stack([input_ids.float(), positions.float(), block_tables.sum(1).float(),
                            context_lens.float(), slot_mapping.float()], dim=1)


def make_inputs(batch: int, width: int = 3, offset: int = 0):
    ids = torch.arange(batch) + 100 + offset
    return (ids, ids + 1000, torch.full((batch, width), 7, dtype=torch.int32),
            torch.full((batch,), 33, dtype=torch.int32), ids * 16)


def test_default_capture_sizes():
    assert default_capture_sizes(1) == [1]
    assert default_capture_sizes(40) == [1, 2, 4, 8, 16, 32, 40]
    assert default_capture_sizes(100) == [1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 100]
    sizes = default_capture_sizes(512)
    assert sizes[:7] == [1, 2, 4, 8, 16, 32, 48] and sizes[-1] == 512 and len(sizes) == 36
    # past 512: eight sizes per doubling, so thousands of rows in flight (asynchronous training) need few graphs
    assert default_capture_sizes(4096)[:36] == sizes
    assert default_capture_sizes(4096)[35:44] == [512, 576, 640, 704, 768, 832, 896, 960, 1024]
    assert default_capture_sizes(4096)[-9:] == [2048, 2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096]
    assert default_capture_sizes(1000)[-3:] == [896, 960, 1000] and default_capture_sizes(520)[-2:] == [512, 520]
    with pytest.raises(ValueError):
        default_capture_sizes(0)


def test_padded_size_buckets():
    runner = CUDAGraphDecodeRunner(RecordingDecode(), 100, 4, 5, "cpu")
    assert [runner.padded_size(b) for b in (1, 3, 4, 5, 33, 48, 49, 100)] == [1, 4, 4, 8, 48, 48, 64, 100]
    assert runner.padded_size(101) is None


def test_eager_fallback_pads_and_slices():
    decode = RecordingDecode()
    runner = CUDAGraphDecodeRunner(decode, 16, 4, 5, "cpu")
    inputs = make_inputs(3)
    out = runner.run(*inputs)
    ids, pos, tables, lens, slots = decode.last
    assert decode.batch_sizes == [4] and out.shape == (3, 5)
    torch.testing.assert_close(out, decode(*inputs))  # the real rows are passed through unchanged
    assert ids[3] == 0 and pos[3] == 0 and lens[3] == 1 and slots[3] == -1
    assert tables[3].eq(0).all() and tables[:3, :3].eq(7).all()  # narrower tables fill the left columns


def test_padding_rows_are_reset_after_a_larger_batch():
    decode = RecordingDecode()
    runner = CUDAGraphDecodeRunner(decode, 16, 4, 5, "cpu")
    runner.run(*make_inputs(7))  # fills rows 0..6 of the static buffers
    out = runner.run(*make_inputs(5, offset=50))  # size 8: rows 5..7 must be padding again
    ids, pos, tables, lens, slots = decode.last
    assert decode.batch_sizes == [8, 8] and out.shape == (5, 5)
    assert slots[5:].eq(-1).all() and lens[5:].eq(1).all() and tables[5:].eq(0).all() and ids[5:].eq(0).all()
    assert ids[:5].tolist() == list(range(150, 155))


def test_batch_larger_than_every_graph_runs_unpadded():
    decode = RecordingDecode()
    runner = CUDAGraphDecodeRunner(decode, 8, 4, 5, "cpu", capture_sizes=[1, 2, 4])
    out = runner.run(*make_inputs(6))
    assert decode.batch_sizes == [6] and out.shape == (6, 5)


def test_rejects_bad_configuration():
    runner = CUDAGraphDecodeRunner(RecordingDecode(), 8, 2, 5, "cpu")
    with pytest.raises(ValueError, match="max_blocks_per_seq"):
        runner.run(*make_inputs(2, width=3))
    with pytest.raises(ValueError, match="capture_sizes"):
        CUDAGraphDecodeRunner(RecordingDecode(), 8, 2, 5, "cpu", capture_sizes=[4, 16])


def test_eager_fallback_logs_once(caplog):
    logger = logging.getLogger("hybridrl")
    logger.addHandler(caplog.handler)  # the hybridrl logger does not propagate to root
    try:
        with caplog.at_level(logging.INFO, logger="hybridrl"):
            runner = CUDAGraphDecodeRunner(RecordingDecode(), 8, 2, 5, "cpu", enforce_eager=True)
            runner.run(*make_inputs(2, width=2))
            runner.run(*make_inputs(2, width=2))
    finally:
        logger.removeHandler(caplog.handler)
    lines = [r.getMessage() for r in caplog.records if "CUDA graphs off" in r.getMessage()]
    assert len(lines) == 1 and "enforce_eager" in lines[0]
    runner.release()  # no graphs: a no-op
    assert not runner.captured


def graph_runner_on_cpu(monkeypatch, decode, max_batch_size=16):
    """A runner on the graph path with CPU stand-ins for torch.cuda.CUDAGraph: like a real graph, a
    replay re-runs `decode` on whatever the static input buffers hold at replay time."""
    runner = CUDAGraphDecodeRunner(decode, max_batch_size, 4, 5, "cpu")
    runner.use_graphs = True

    class FakeGraph:
        size = 0

        def pool(self):
            return "pool"

        def replay(self):
            runner._outputs[:self.size] = decode(*runner.views(self.size))

    @contextlib.contextmanager
    def fake_capture(graph, pool, device):
        yield
        graph.size = decode.batch_sizes[-1]  # the size the runner just captured

    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(cuda_graph, "capturing", fake_capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    return runner


def test_first_replay_after_capture_reads_the_staged_batch(monkeypatch):
    """Regression (H200: graphs diverged from eager from the first decode step on): `run` staged the
    batch, then captured lazily, and capture's padding reset wiped the staged rows, so the first replay
    after every (re)capture decoded padding only and stored no K/V."""
    decode = RecordingDecode()
    runner = graph_runner_on_cpu(monkeypatch, decode)
    inputs = make_inputs(3)
    out = runner.run(*inputs)  # captures size 4 lazily (the pool's base), then replays it
    assert runner.captured and decode.batch_sizes[-1] == 4 and list(runner._graphs) == [4]
    capture_calls = decode.slot_mappings[:-1]
    assert len(capture_calls) == 2  # a warm-up and a capture: no graph of a size nothing used
    assert all(s.eq(-1).all() for s in capture_calls)  # capture never writes the KV cache
    torch.testing.assert_close(out, decode(*inputs))
    torch.testing.assert_close(runner.run(*make_inputs(2)), decode(*make_inputs(2)))  # size 2 joins the pool
    assert sorted(runner._graphs) == [2, 4]
    # A batch larger than the base (rows admitted after others finished) restarts the pool from the largest
    # size, so that no later batch restarts it again.
    runner.capture_time_s = captured = 100.0  # as if much had been captured before the restart
    torch.testing.assert_close(runner.run(*make_inputs(7, offset=9)), decode(*make_inputs(7, offset=9)))
    assert sorted(runner._graphs) == [8, 16] and runner._outputs.shape[0] == 16
    torch.testing.assert_close(runner.run(*make_inputs(13, offset=2)), decode(*make_inputs(13, offset=2)))
    assert sorted(runner._graphs) == [8, 16]  # 13 pads to 16: no new pool, no new graph
    assert runner.capture_time_s >= captured  # cumulative across pool restarts (the engine reports differences)
    runner.release()
    assert runner.capture_time_s >= captured
    torch.testing.assert_close(runner.run(*inputs), decode(*inputs))
    runner.release()
    assert not runner.captured
    torch.testing.assert_close(runner.run(*inputs), decode(*inputs))  # recaptured, same again


class PagedToyDecode:
    """A GPU decode_fn with the real kernels: embed, store K/V, paged attention, project to logits."""

    def __init__(self, num_blocks=64, page=16, vocab=97, device="cuda", dtype=torch.bfloat16):
        gen = torch.Generator(device=device).manual_seed(0)
        rand = lambda *s: torch.randn(*s, generator=gen, device=device, dtype=dtype)  # noqa: E731
        self.k_emb, self.v_emb, self.q_emb = rand(vocab, 2, 64), rand(vocab, 2, 64), rand(4096, 14, 64)
        self.head = rand(14 * 64, vocab)
        self.k_cache, self.v_cache = rand(num_blocks, page, 2, 64), rand(num_blocks, page, 2, 64)

    def __call__(self, input_ids, positions, block_tables, context_lens, slot_mapping):
        from hybridrl.rollout.engine.attention.triton_decode import paged_decode_attention, store_kv_cache

        store_kv_cache(self.k_emb[input_ids], self.v_emb[input_ids], self.k_cache, self.v_cache, slot_mapping)
        out = paged_decode_attention(self.q_emb[positions], self.k_cache, self.v_cache, block_tables,
                                     context_lens, 0.125)
        return out.flatten(1) @ self.head


@pytest.mark.gpu
def test_graph_replay_matches_eager_and_padding_does_not_write():
    eager_fn, graph_fn = PagedToyDecode(), PagedToyDecode()
    runner = CUDAGraphDecodeRunner(graph_fn, 16, 8, 97, "cuda")
    batch = 5  # padded to 8
    tables = (torch.arange(batch * 4, dtype=torch.int32, device="cuda") + 1).view(batch, 4)
    lens = torch.tensor([1, 17, 30, 47, 64], dtype=torch.int32, device="cuda")
    last = lens.long() - 1  # the decode token's position, stored at its page + offset
    slots = tables[torch.arange(batch, device="cuda"), last // 16].long() * 16 + last % 16
    ids = torch.arange(batch, device="cuda") * 3
    args = (ids, last, tables, lens, slots)
    out = runner.run(*args)
    assert runner.captured and out.shape == (batch, 97)
    expected = eager_fn(*args)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(graph_fn.k_cache, eager_fn.k_cache)  # padded rows (slot -1) wrote nothing
    runner.release()
    assert not runner.captured
    torch.testing.assert_close(runner.run(*args), expected)  # captured again lazily
    assert runner.captured


@pytest.mark.gpu
def test_capture_keeps_the_allocators_cached_blocks():
    """Capturing leaves blocks that others (the trainer) cached in the allocator where they are
    (torch.cuda.graph's entry empties the cache; a rollout captures after every wake-up)."""
    runner = CUDAGraphDecodeRunner(PagedToyDecode(), 16, 8, 97, "cuda")
    torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # freed at once: 64 MiB cached
    cached = torch.cuda.memory_reserved()
    runner.capture([16])
    assert runner.captured and torch.cuda.memory_reserved() >= cached


@pytest.mark.gpu
def test_engine_graphs_and_triton_match_eager_torch_path():
    """The whole engine on CUDA (Triton kernels, padded graph replay) samples what the eager torch path does."""
    from tests.rollout.engine.helpers import PROMPTS, make_model

    from hybridrl.rollout.base import SamplingParams
    from hybridrl.rollout.engine.attention import TORCH_BACKEND
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    model = make_model("qwen2", hidden_size=64, num_heads=4, num_kv_heads=2)  # fp32, head_dim 16
    params = SamplingParams(n=3, max_new_tokens=24, seed=5)  # 9 sequences: replayed in the 16-row graph
    kwargs = dict(device="cuda", num_kv_blocks=128, block_size=4, max_num_seqs=16)
    graphed = LLMEngine(model, **kwargs)
    assert graphed.runner.layers[0].backend.name == "triton"
    out = graphed.generate(PROMPTS, params)
    assert graphed.runner.graph_runner.captured
    eager = LLMEngine(model, enforce_eager=True, **kwargs)
    for layer in eager.runner.layers:
        layer.backend = TORCH_BACKEND
    expected = eager.generate(PROMPTS, params)
    assert out.token_ids == expected.token_ids
    for got, want in zip(out.log_probs, expected.log_probs):
        assert got == pytest.approx(want, abs=1e-3)
    # The KV cache comes back at the same address (CUDA VMM): the graphs outlive the sleep and replay.
    captures = graphed.runner.graph_runner.capture_time_s
    graphed.sleep()
    assert graphed.runner.graph_runner.captured and graphed.runner.kv_store.stable_address
    graphed.wake_up()
    assert graphed.generate(PROMPTS, params).token_ids == expected.token_ids
    assert graphed.runner.graph_runner.capture_time_s == captures
    # keep_decode_graphs=False: freed with the cache, captured again after the wake-up.
    graphed.runner.keep_graphs = False
    graphed.sleep()
    assert not graphed.runner.graph_runner.captured
    graphed.wake_up()
    assert graphed.generate(PROMPTS, params).token_ids == expected.token_ids
    assert graphed.runner.graph_runner.capture_time_s > captures


def test_configured_capture_sizes_reach_the_engine_and_always_cover_max_num_seqs():
    from hybridrl.rollout.engine.cuda_graph import graph_sizes
    from tests.rollout.engine.helpers import make_engine, make_model

    assert graph_sizes(None, 64) is None  # the default ladder
    assert graph_sizes([8, 1, 8], 64) == [1, 8, 64]
    for bad in ([], [0, 4], [128]):
        with pytest.raises(ValueError, match=r"cudagraph_capture_sizes=.* must be batch sizes in \[1, max_num_seqs=64\]"):
            graph_sizes(bad, 64)
    engine = make_engine(make_model("qwen2"), max_num_seqs=64, cudagraph_capture_sizes=[4, 16])
    assert engine.runner.graph_runner.capture_sizes == [4, 16, 64]


def test_a_capture_failure_names_the_key_that_turns_graphs_off(monkeypatch):
    """What CUDA or NCCL raise inside a capture (e.g. a collective an old NCCL cannot capture) becomes an
    error that names rollout.enforce_eager, with the original as its cause."""
    decode = RecordingDecode()
    runner = graph_runner_on_cpu(monkeypatch, decode)

    @contextlib.contextmanager
    def refusing_capture(graph, pool, device):
        yield
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(cuda_graph, "capturing", refusing_capture)
    with pytest.raises(cuda_graph.GraphCaptureError,
                       match=r"for 4 rows failed: operation not permitted.*actor_rollout_ref\.rollout\.enforce_eager="
                             r"true") as err:
        runner.run(*make_inputs(3))
    assert isinstance(err.value.__cause__, RuntimeError) and not runner.captured
