"""CUDAGraphPrefillRunner: which steps it takes, and that its padded static buffers leave every real sequence's
output unchanged (off CUDA, eagerly through the same buffers); graph replay on GPU."""

from __future__ import annotations

import pytest
import torch

from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.engine.attention.metadata import AttentionMetadata
from hybridrl.rollout.engine.prefill_graph import CUDAGraphPrefillRunner, token_sizes_for
from tests.rollout.engine.helpers import PROMPTS, make_engine, make_model


def test_token_sizes_stop_at_the_step_budget():
    assert token_sizes_for(8192) == [64, 128, 256, 512, 1024, 2048, 4096]
    assert token_sizes_for(300) == [64, 128, 256]
    assert token_sizes_for(40) == [40]


def test_a_graphed_step_fits_one_query_tile_of_the_prefill_kernel():
    """The graphs launch the Triton prefill kernel with one query tile per sequence: the longest query run they
    take is that tile."""
    triton_prefill = pytest.importorskip("hybridrl.rollout.engine.attention.triton_prefill")
    from hybridrl.rollout.engine.prefill_graph import GRAPH_MAX_QUERY

    assert triton_prefill.query_block_size(GRAPH_MAX_QUERY) == GRAPH_MAX_QUERY == triton_prefill.MAX_BLOCK_M


def step_meta(query_lens: list[int]) -> AttentionMetadata:
    starts = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    return AttentionMetadata(True, torch.zeros(sum(query_lens), dtype=torch.int64),
                             torch.zeros(len(query_lens), 2, dtype=torch.int32),
                             torch.tensor(query_lens, dtype=torch.int32) + 5, starts, max(query_lens))


def test_only_short_steps_with_room_take_a_graph():
    runner = CUDAGraphPrefillRunner(lambda *args: None, 4, 2, [64, 128], "cpu", enabled=True)
    assert runner.accepts(step_meta([17, 20]), 37) == 64
    assert runner.accepts(step_meta([64, 64]), 128) == 128
    assert runner.accepts(step_meta([65]), 65) is None  # a sequence longer than one query tile
    assert runner.accepts(step_meta([50, 50, 50]), 150) is None  # more tokens than the largest graph
    assert runner.accepts(step_meta([1] * 5), 5) is None  # more sequences than the graphs hold
    off = CUDAGraphPrefillRunner(lambda *args: None, 4, 2, [64], "cpu", enabled=False)
    assert off.accepts(step_meta([3]), 3) is None


def follow_up_turns(engine, turns: int = 3, log_probs: dict[str, list[float]] | None = None) -> dict[str, list[int]]:
    """Every prompt's conversation over `turns` turns, 3 observation tokens between them (prefix-cache hits,
    steps of different sizes, so each staging follows a larger one); the sampled ids per conversation (and
    their log-probs into `log_probs`, when given)."""
    params = SamplingParams(seed=3, temperature=1.2, max_new_tokens=6, ignore_eos=True)
    conversations = {str(i): list(prompt) for i, prompt in enumerate(PROMPTS)}
    sampled = {key: [] for key in conversations}
    for turn in range(turns):
        active = list(conversations)[turn:]  # one conversation fewer each turn
        for key in active:
            engine.add_request(f"{key}/{turn}", conversations[key], params)
        while engine.has_unfinished_requests():
            for request_id, out in engine.step():
                key = request_id.split("/")[0]
                conversations[key] += out.token_ids + [5, 6, 7]
                sampled[key] += out.token_ids
                if log_probs is not None:
                    log_probs.setdefault(key, []).extend(out.log_probs)
    return sampled


class RecordingForward:
    """A forward that keeps the padded inputs it was given and returns each `last` token's id and position."""

    def __call__(self, input_ids, positions, meta, last):
        self.seen = {"ids": input_ids.clone(), "positions": positions.clone(), "slots": meta.slot_mapping.clone(),
                     "tables": meta.block_tables.clone(), "lens": meta.context_lens.clone(),
                     "starts": meta.query_start.clone(), "last": last.clone(), "max_q": meta.max_seqlen_q}
        return torch.stack([input_ids[last], positions[last]], dim=1)


def stage_step(runner, query_lens: list[int], first_id: int):
    tokens = sum(query_lens)
    ids = torch.arange(first_id, first_id + tokens)
    meta = step_meta(query_lens)
    meta.slot_mapping = ids * 10
    meta.block_tables = torch.full((len(query_lens), 2), 9, dtype=torch.int32)
    last = torch.tensor(query_lens).cumsum(0) - 1
    size = runner.accepts(meta, tokens)
    return runner.run(size, ids, ids + 1000, meta, last)


def test_a_smaller_step_after_a_larger_one_leaves_only_padding_past_its_rows():
    """Padding tokens write no KV (slot -1), padding sequences have no queries (the last offset repeated) and
    read token 0; a step staged after a larger one keeps none of its rows."""
    forward = RecordingForward()
    runner = CUDAGraphPrefillRunner(forward, 4, 3, [8, 32], "cpu", enabled=True)
    stage_step(runner, [5, 9, 6, 4], first_id=100)  # 24 tokens, 4 sequences: the 32-token buffers
    out = stage_step(runner, [2, 3], first_id=500)  # 5 tokens, 2 sequences: the 8-token buffers
    seen = forward.seen
    assert out.tolist() == [[501, 1501], [504, 1504]]  # each real sequence's last token, nothing else
    assert seen["ids"].tolist() == [500, 501, 502, 503, 504, 0, 0, 0]
    assert seen["positions"].tolist() == [1500, 1501, 1502, 1503, 1504, 0, 0, 0]
    assert seen["slots"].tolist() == [5000, 5010, 5020, 5030, 5040, -1, -1, -1]
    assert seen["starts"].tolist() == [0, 2, 5, 5, 5] and seen["last"].tolist() == [1, 4, 0, 0]
    assert seen["lens"][:2].tolist() == [7, 8] and seen["tables"][:2, :2].tolist() == [[9, 9], [9, 9]]
    assert seen["max_q"] == 64 and runner.num_runs == 2 and not runner.captured


@pytest.mark.gpu
def test_on_cuda_graphed_follow_up_turns_equal_eager_ones():
    """Replayed prefill graphs (decode graphs on in both engines) sample what eager prefill steps sample;
    the graphs outlive a sleep when the KV cache comes back at the same address."""
    model = make_model("qwen2", hidden_size=64, num_heads=4, num_kv_heads=2)  # fp32, head_dim 16
    kwargs = dict(device="cuda", num_kv_blocks=128, block_size=4, max_num_seqs=16)
    graphed, eager = make_engine(model, **kwargs), make_engine(model, **kwargs)
    eager.runner.prefill_graphs.enabled = False
    expected = follow_up_turns(eager)
    assert follow_up_turns(graphed) == expected
    assert graphed.runner.prefill_graphs.captured and graphed.runner.prefill_graphs.held_bytes > 0
    assert graphed.take_metrics()["rollout/prefill_steps_graphed"] >= 3
    captures = graphed.runner.graphs_capture_time_s
    graphed.sleep()
    graphed.wake_up()
    assert follow_up_turns(graphed) == expected
    assert graphed.runner.graphs_capture_time_s == captures


@pytest.mark.gpu
def test_on_cuda_batch_invariant_graphed_follow_up_turns_equal_eager_ones_bit_for_bit():
    """With batch_invariant a token's numerics do not depend on what shares its step, padding included: the
    graphed follow-up turns sample the eager ones' tokens with the same log-probs, bit for bit."""
    model = make_model("qwen2", scale=1.0, hidden_size=64, num_heads=4, num_kv_heads=2)  # head_dim 16
    kwargs = dict(device="cuda", dtype=torch.bfloat16, num_kv_blocks=128, block_size=4, max_num_seqs=16,
                  batch_invariant=True)
    graphed, eager = make_engine(model, **kwargs), make_engine(model, **kwargs)
    eager.runner.prefill_graphs.enabled = False
    eager_log_probs, graphed_log_probs = {}, {}
    expected = follow_up_turns(eager, log_probs=eager_log_probs)
    assert follow_up_turns(graphed, log_probs=graphed_log_probs) == expected
    assert graphed_log_probs == eager_log_probs
    assert graphed.take_metrics()["rollout/prefill_steps_graphed"] >= 3
