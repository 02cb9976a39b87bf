"""LLMEngine behaviour: seeds, preemption, prefix cache across calls, sleep/wake, sizing errors."""

import pytest
import torch

from hybridrl.rollout.base import SamplingParams
from hybridrl.rollout.engine import sampler
from hybridrl.rollout.engine.sampler import row_key, sample
from tests.rollout.engine.helpers import PROMPTS, make_engine, make_model

SAMPLED = dict(temperature=0.8, top_k=30, top_p=0.95, max_new_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def model():
    return make_model("qwen2", seed=4)


def test_same_seed_same_tokens_different_seed_different(model):
    engine = make_engine(model)
    a = engine.generate(PROMPTS, SamplingParams(n=2, seed=7, **SAMPLED))
    b = make_engine(model).generate(PROMPTS, SamplingParams(n=2, seed=7, **SAMPLED))
    c = engine.generate(PROMPTS, SamplingParams(n=2, seed=8, **SAMPLED))
    assert a.token_ids == b.token_ids and a.log_probs == b.log_probs
    assert a.token_ids != c.token_ids


def test_unseeded_calls_use_engine_seed_plus_call_counter(model):
    first, second = make_engine(model, seed=5), make_engine(model, seed=5)
    params = SamplingParams(**SAMPLED)
    x1, x2 = first.generate(PROMPTS, params), first.generate(PROMPTS, params)
    assert x1.token_ids != x2.token_ids
    assert second.generate(PROMPTS, params).token_ids == x1.token_ids


def test_tokens_do_not_depend_on_batch_composition(model):
    params = SamplingParams(n=2, seed=11, **SAMPLED)
    together = make_engine(model).generate(PROMPTS, params)
    one_at_a_time = make_engine(model, max_num_seqs=1).generate(PROMPTS, params)
    alone = make_engine(model).generate(PROMPTS[:1], params)
    assert one_at_a_time.token_ids == together.token_ids
    assert alone.token_ids == together.token_ids[:2]


@pytest.mark.parametrize("greedy", [True, False])
def test_preemption_gives_identical_outputs(model, greedy):
    params = SamplingParams(do_sample=not greedy, n=3, seed=2, **{**SAMPLED, "max_new_tokens": 16})
    free = make_engine(model).generate(PROMPTS, params)
    tight = make_engine(model, num_kv_blocks=10).generate(PROMPTS, params)
    assert free.metrics["rollout/num_preempted"] == 0
    assert tight.metrics["rollout/num_preempted"] > 0
    assert tight.token_ids == free.token_ids
    torch.testing.assert_close(torch.tensor(tight.log_probs), torch.tensor(free.log_probs), atol=1e-4, rtol=0)


@pytest.mark.parametrize("prefix_caching,new_tokens,peak", [
    (True, 6, 3 + 3 * 2), (True, 5, 3 + 3 * 1), (False, 6, 3 * 5), (False, 5, 3 * 4)])
def test_kv_peak_counts_shared_prompt_blocks_once(model, prefix_caching, new_tokens, peak):
    """12 prompt tokens = 3 blocks of 4, n=3; the last sampled token never needs a KV slot, so a row holds
    ceil((12 + new_tokens - 1) / 4) blocks, of which the 3 prompt blocks are shared with prefix caching."""
    engine = make_engine(model, enable_prefix_caching=prefix_caching)
    out = engine.generate(PROMPTS[:1], SamplingParams(do_sample=False, n=3, max_new_tokens=new_tokens, ignore_eos=True))
    assert out.metrics["rollout/kv_cache_peak_blocks_max"] == peak
    assert out.metrics["rollout/kv_cache_peak_usage_max"] == peak / engine.num_kv_blocks


def test_repeated_prompts_hit_the_prefix_cache_across_calls(model):
    engine = make_engine(model)
    params = SamplingParams(do_sample=False, max_new_tokens=4, ignore_eos=True)
    first = engine.generate(PROMPTS[:1], params)
    second = engine.generate(PROMPTS[:1], params)
    assert first.metrics["rollout/prefix_cache_hit_tokens"] == 0
    assert second.metrics["rollout/prefix_cache_hit_tokens"] == 12  # the 3 full prompt blocks
    assert second.token_ids == first.token_ids
    engine.update_weights(model.named_parameters())  # new weights invalidate cached KV
    assert engine.generate(PROMPTS[:1], params).metrics["rollout/prefix_cache_hit_tokens"] == 0


def test_sleep_frees_kv_and_wake_up_restores(model):
    engine = make_engine(model)
    params = SamplingParams(do_sample=False, max_new_tokens=6, ignore_eos=True)
    before = engine.generate(PROMPTS, params)
    engine.sleep()
    assert engine.runner.kv_cache is None
    with pytest.raises(RuntimeError, match="wake_up"):
        engine.generate(PROMPTS, params)
    engine.wake_up()
    assert engine.runner.kv_cache.numel() * engine.runner.kv_cache.element_size() == engine.kv_cache_bytes
    assert engine.generate(PROMPTS, params).token_ids == before.token_ids


def test_request_that_can_never_fit_names_the_knobs(model):
    engine = make_engine(model, num_kv_blocks=3, block_size=4)  # 12 tokens of KV in total
    with pytest.raises(ValueError) as err:
        engine.generate([[5] * 6], SamplingParams(max_new_tokens=16))
    msg = str(err.value)
    assert "needs 6 KV blocks" in msg and "has 3 blocks" in msg
    assert "actor_rollout_ref.rollout.response_length=6" in msg
    assert "actor_rollout_ref.rollout.gpu_memory_utilization=1.0" not in msg
    assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.95" in msg
    assert "actor_rollout_ref.rollout.max_num_seqs=128" in msg


def test_cpu_default_kv_budget_and_bf16_engine(model):
    engine = make_engine(model, num_kv_blocks=None, dtype=torch.bfloat16, max_num_seqs=4, max_model_len=64)
    assert engine.num_kv_blocks == 4 * 64 // 4 and engine.runner.kv_cache.dtype == torch.bfloat16
    assert next(model.parameters()).dtype == torch.float32  # the source model is untouched
    out = engine.generate(PROMPTS, SamplingParams(do_sample=False, max_new_tokens=4, ignore_eos=True))
    assert all(len(t) == 4 for t in out.token_ids)


def test_sampler_respects_top_k_and_is_keyed_per_row():
    logits = torch.randn(4, 50)
    keys = torch.tensor([row_key(0, r) for r in range(4)])
    steps = torch.zeros(4, dtype=torch.int64)
    top3 = logits.topk(3).indices
    for step in range(20):
        tokens, _ = sample(logits, 1.0, 3, 1.0, False, keys, steps + step)
        assert all(t in row for t, row in zip(tokens.tolist(), top3.tolist()))
    solo, _ = sample(logits[2:3], 1.0, -1, 1.0, False, keys[2:3], steps[2:3])
    batched, _ = sample(logits, 1.0, -1, 1.0, False, keys, steps)
    assert solo.item() == batched[2].item()


@pytest.mark.parametrize("top_k,top_p,greedy", [(-1, 1.0, False), (5, 0.8, False), (-1, 1.0, True)])
def test_sampling_in_row_chunks_gives_the_tokens_of_one_pass(monkeypatch, top_k, top_p, greedy):
    logits = torch.randn(10, 64)
    keys = torch.tensor([row_key(3, r) for r in range(10)])
    steps = torch.arange(10, dtype=torch.int64)
    whole = sample(logits, 0.7, top_k, top_p, greedy, keys, steps)
    monkeypatch.setattr(sampler, "SAMPLE_CHUNK_ELEMENTS", 3 * 64)  # 3 rows per chunk: 4 chunks, the last short
    chunk_rows, sample_rows = [], sampler._sample_rows
    monkeypatch.setattr(sampler, "_sample_rows", lambda logits, *a: chunk_rows.append(len(logits)) or sample_rows(logits, *a))
    chunked = sample(logits, 0.7, top_k, top_p, greedy, keys, steps)
    assert chunk_rows == [3, 3, 3, 1]
    assert torch.equal(whole[0], chunked[0]) and torch.allclose(whole[1], chunked[1])


def test_cpu_uses_the_torch_attention_backend(model):
    from hybridrl.rollout.engine.attention import select_backend

    assert select_backend(torch.device("cpu"), 16).name == "torch"
    engine = make_engine(model, device="cpu")  # also on a machine with a GPU
    assert {layer.backend.name for layer in engine.runner.layers} == {"torch"}
    assert not engine.runner.graph_runner.use_graphs


@pytest.mark.parametrize("stop", [False, True])
def test_decode_bursts_match_single_steps(model, stop):
    """Several decode steps per host round trip (tokens fed back on the device, KV slots reserved
    ahead, each burst queued behind the one before) must give exactly the tokens and log-probs of one
    step per round trip, EOS stops included (rows that stopped decode a queued burst as junk)."""
    params = SamplingParams(n=3, seed=3, temperature=0.9, max_new_tokens=14, ignore_eos=not stop,
                            eos_token_ids=[7, 11, 19, 23, 29, 31] if stop else [])
    single = make_engine(model, max_decode_burst=1, queue_bursts=False).generate(PROMPTS, params)
    burst = make_engine(model, max_decode_burst=5).generate(PROMPTS, params)
    queued_steps = make_engine(model, max_decode_burst=1).generate(PROMPTS, params)
    assert queued_steps.metrics["rollout/decode_bursts_chained"] > 0 and queued_steps.token_ids == single.token_ids
    assert burst.metrics["rollout/decode_bursts"] < single.metrics["rollout/decode_bursts"]
    assert burst.metrics["rollout/decode_bursts_chained"] > 0  # queued behind the burst before (no one waits)
    assert single.metrics["rollout/decode_bursts_chained"] == 0
    assert burst.token_ids == single.token_ids
    torch.testing.assert_close(torch.tensor(sum(burst.log_probs, [])), torch.tensor(sum(single.log_probs, [])),
                               atol=1e-5, rtol=0)
    unqueued = make_engine(model, max_decode_burst=5, queue_bursts=False).generate(PROMPTS, params)
    assert unqueued.metrics["rollout/decode_bursts_chained"] == 0 and unqueued.token_ids == single.token_ids
    lengths = [len(t) for t in burst.token_ids]
    assert (min(lengths) < 14) if stop else set(lengths) == {14}


def test_bursts_with_tight_kv_fall_back_to_single_steps(model):
    params = SamplingParams(n=3, seed=2, max_new_tokens=16, ignore_eos=True)
    free = make_engine(model, max_decode_burst=8).generate(PROMPTS, params)
    tight = make_engine(model, max_decode_burst=8, num_kv_blocks=10).generate(PROMPTS, params)
    assert tight.metrics["rollout/num_preempted"] > 0 and tight.token_ids == free.token_ids


def test_max_decode_burst_is_validated(model):
    with pytest.raises(ValueError, match="max_decode_burst"):
        make_engine(model, max_decode_burst=0)


@pytest.mark.gpu
def test_cuda_kv_cache_is_sized_for_the_workload_when_the_budget_allows_more(model):
    """max_num_seqs x max_model_len tokens can never be exceeded at once: no point reserving more."""
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    engine = LLMEngine(model, device="cuda", max_num_seqs=8, max_model_len=64, block_size=16,
                       gpu_memory_utilization=0.5)
    assert engine.num_kv_blocks == 8 * 64 // 16
    out = engine.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=20, ignore_eos=True))
    assert [len(t) for t in out.token_ids] == [20] * 6


@pytest.mark.gpu
def test_cuda_wake_up_shrinks_the_cache_when_the_trainer_took_the_memory(model, caplog):
    """Memory taken after start-up (here a tensor standing for trainer state) shrinks the next generation's
    cache instead of leaving its activations to run out of memory; the batch preempts and still finishes
    with the same tokens. Freed again, the next wake-up gets the planned cache back."""
    from hybridrl.rollout.engine.kv_memory import MARGIN_BYTES
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    # 256-token blocks (128 KiB here): the device frees memory in 2 MiB pages, so the hog below can only be
    # sized to within 16 blocks; the planned cache (24 rows x 2 blocks) must stay well above that.
    engine = LLMEngine(model, device="cuda", max_num_seqs=24, max_model_len=512, block_size=256,
                       gpu_memory_utilization=0.9, num_kv_blocks=None)
    assert engine.planned_kv_blocks == 48
    params = SamplingParams(n=8, max_new_tokens=300, ignore_eos=True, seed=1)  # every row crosses into a 2nd block
    want = engine.generate(PROMPTS, params)
    engine.sleep()
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    room = engine.activation_bytes + MARGIN_BYTES + 20 * engine.runner.block_bytes  # 4..20 blocks after paging
    hog = torch.empty(free - room, dtype=torch.uint8, device="cuda")
    with caplog.at_level("WARNING"):
        engine.wake_up()
    assert 1 <= engine.num_kv_blocks < engine.planned_kv_blocks
    assert "instead of the" in caplog.text and "gpu_memory_utilization" in caplog.text
    got = engine.generate(PROMPTS, params)
    assert got.token_ids == want.token_ids and got.metrics["rollout/num_preempted"] > 0
    engine.sleep()
    del hog
    engine.wake_up()
    assert engine.num_kv_blocks == engine.planned_kv_blocks


@pytest.mark.gpu
def test_cuda_wake_up_keeps_the_trainers_cached_blocks_unless_the_plan_needs_them(model):
    """Blocks the allocator caches between steps (the trainer's) stay cached when the planned cache fits
    beside them, so training does not allocate them again; when it does not fit, they go back to the
    driver and the wake-up still gets the planned cache."""
    from hybridrl.rollout.engine.kv_memory import MARGIN_BYTES
    from hybridrl.rollout.engine.llm_engine import LLMEngine

    engine = LLMEngine(model, device="cuda", max_num_seqs=24, max_model_len=512, block_size=256,
                       gpu_memory_utilization=0.9, num_kv_blocks=None)
    cache_bytes = engine.planned_kv_blocks * engine.runner.block_bytes
    engine.sleep()
    torch.cuda.empty_cache()
    torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # freed at once: 256 MiB in the allocator's cache
    cached = torch.cuda.memory_reserved()
    engine.wake_up()
    assert engine.num_kv_blocks == engine.planned_kv_blocks
    assert torch.cuda.memory_reserved() >= cached  # kept (the cache may be carved out of the freed block)
    engine.sleep()
    free, _ = torch.cuda.mem_get_info()  # now cache all the device but half the plan: the wake-up needs it back
    torch.empty(free - engine.activation_bytes - MARGIN_BYTES - cache_bytes // 2, dtype=torch.uint8, device="cuda")
    engine.wake_up()
    assert engine.num_kv_blocks == engine.planned_kv_blocks
    assert torch.cuda.memory_reserved() < cached + cache_bytes + (64 << 20)
    out = engine.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=8, ignore_eos=True))
    assert [len(t) for t in out.token_ids] == [8] * 6


@pytest.mark.parametrize("max_model_len,expected", [(None, 24 + 40), (100, 100)])
def test_trainer_engine_max_model_len_follows_the_rollout_config(model, max_model_len, expected):
    """rollout.max_model_len null means prompt_length + response_length (the key's documented default;
    the engine used to take the model's max_position_embeddings, which also sized the KV cache)."""
    from hybridrl.config import load_config
    from hybridrl.rollout import build_rollout_backend

    cfg = load_config(["data.max_prompt_length=24", "data.max_response_length=40",
                       f"actor_rollout_ref.rollout.max_model_len={'null' if max_model_len is None else max_model_len}",
                       "actor_rollout_ref.rollout.dtype=float32"])
    engine = build_rollout_backend("hybrid", model, pad_token_id=0, eos_token_ids=[], device_type="cpu",
                                   rollout_cfg=cfg.actor_rollout_ref.rollout)
    assert engine.max_model_len == expected
    assert engine.num_kv_blocks == cfg.actor_rollout_ref.rollout.max_num_seqs * -(-expected // engine.block_size)


def test_a_cache_shrunk_below_one_sequence_says_what_holds_the_memory(model, monkeypatch):
    """The wake-up re-check (CUDA only) can leave fewer blocks than planned; the error then points at the
    trainer's memory, not at gpu_memory_utilization. On CPU the re-check's answer is stood in for."""
    engine = make_engine(model, num_kv_blocks=64)
    engine.sleep()
    monkeypatch.setattr(engine, "_blocks_free_now", lambda: 2)  # little free at this wake-up
    engine.wake_up()
    assert engine.num_kv_blocks == 2 and engine.planned_kv_blocks == 64
    with pytest.raises(ValueError, match="only 2 of the 64 planned fit.*optimizer_offload=true"):
        engine.generate(PROMPTS[:1], SamplingParams(do_sample=False, max_new_tokens=12, ignore_eos=True))


@pytest.mark.parametrize("max_decode_burst", [1, 8])
def test_a_cache_shrunk_at_wake_up_never_reads_the_last_generation_block_ids(model, monkeypatch, max_decode_burst):
    """Block-table rows are reused across generations: a row whose new sequence holds fewer blocks kept the
    previous sequence's ids in its tail, which the prefill's context gather read. After a wake-up with a
    smaller cache those ids lie past its end (an index error on CPU, a device-side assert on CUDA, found by
    the wake-up GPU test). On CPU the re-check's answer is stood in for."""
    params = SamplingParams(n=3, seed=2, max_new_tokens=16, ignore_eos=True)
    engine = make_engine(model, num_kv_blocks=64, max_decode_burst=max_decode_burst)
    want = engine.generate(PROMPTS, params)  # rows hold block ids up to ~30
    engine.sleep()
    monkeypatch.setattr(engine, "_blocks_free_now", lambda: 10)
    engine.wake_up()
    got = engine.generate(PROMPTS, params)
    assert got.metrics["rollout/num_preempted"] > 0 and got.token_ids == want.token_ids


@pytest.mark.parametrize("fp32_residual", [True, False])
def test_the_model_key_decides_the_engines_residual_stream(model, fp32_residual):
    """actor_rollout_ref.model.fp32_residual_stream reaches the engine the rollout worker builds: with bf16
    weights the stream is fp32, or the weights' dtype when the key is false."""
    from hybridrl.config import load_config
    from hybridrl.rollout import build_rollout_backend

    cfg = load_config(["actor_rollout_ref.rollout.dtype=bfloat16"])
    engine = build_rollout_backend("hybrid", model, pad_token_id=0, eos_token_ids=[], device_type="cpu",
                                   rollout_cfg=cfg.actor_rollout_ref.rollout, fp32_residual=fp32_residual)
    assert engine.model.residual_dtype == (torch.float32 if fp32_residual else None)


@pytest.mark.parametrize("recompute", [True, False])
def test_the_engine_takes_whether_weight_updates_drop_its_kv_from_the_config(model, recompute):
    from hybridrl.config import load_config
    from hybridrl.rollout import build_rollout_backend

    cfg = load_config([f"actor_rollout_ref.rollout.recompute_kv_cache_after_weight_updates={str(recompute).lower()}",
                       "actor_rollout_ref.rollout.max_model_len=64"])
    engine = build_rollout_backend("hybrid", model, pad_token_id=0, eos_token_ids=[], device_type="cpu",
                                   rollout_cfg=cfg.actor_rollout_ref.rollout, device="cpu")
    manager = engine.block_manager
    engine.update_weights(model.named_parameters())
    assert engine.recompute_kv_after_weight_updates is recompute and (engine.block_manager is manager) is not recompute
