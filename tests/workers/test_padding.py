"""use_remove_padding: rows aligned left with no attention mask (or all-padding columns trimmed) per micro-batch,
outputs equal to the padded forward."""

from __future__ import annotations

import pytest
import torch

from hybridrl.models.hf import load_causal_lm
from hybridrl.workers.forward import response_log_probs
from hybridrl.workers.padding import Trim, align_sequences, find_alignment, find_trim, pad_responses, trim_sequences
from tests.workers.helpers import build_actor, build_critic, ragged_batch

ON = ["actor_rollout_ref.model.use_remove_padding=true", "critic.model.use_remove_padding=true"]
OFF = ["actor_rollout_ref.model.use_remove_padding=false", "critic.model.use_remove_padding=false"]


def test_trim_keeps_the_shift_column_and_the_longest_rows():
    # P=4, R=3: prompts of 2 and 1 tokens, responses of 1 and 2 tokens
    attention = torch.tensor([[0, 0, 1, 1, 1, 0, 0],
                              [0, 0, 0, 1, 1, 1, 0]])
    trim = find_trim(attention, attention[:, 4:])
    assert trim == Trim(left=2, response_width=2, full_response_width=3)
    tensors = {"input_ids": torch.arange(14).view(2, 7), "attention_mask": attention,
               "position_ids": torch.zeros(2, 7, dtype=torch.long), "responses": torch.arange(6).view(2, 3)}
    out = trim_sequences(tensors, trim)
    assert out["input_ids"].tolist() == [[2, 3, 4, 5], [9, 10, 11, 12]] and out["responses"].shape == (2, 2)
    assert pad_responses(torch.ones(2, 2), trim).tolist() == [[1, 1, 0], [1, 1, 0]]
    empty_prompts = torch.tensor([[0, 0, 1, 0]])  # P=2 with no prompt token: column P-1 stays
    assert find_trim(empty_prompts, empty_prompts[:, 2:]).left == 1


def test_alignment_moves_each_row_to_column_zero():
    # P=4, R=3: prompts of 2 and 1 tokens, responses of 1 and 2 tokens
    attention = torch.tensor([[0, 0, 1, 1, 1, 0, 0],
                              [0, 0, 0, 1, 1, 1, 0]])
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    alignment = find_alignment(attention, attention[:, 4:], positions)
    assert alignment.shifts.tolist() == [2, 3] and alignment.width == 4  # longest prompt 2 + kept response 2
    assert alignment.response_columns().tolist() == [[1, 2], [0, 1]]  # the last prompt token, then on
    tensors = {"input_ids": torch.arange(14).view(2, 7), "attention_mask": attention,
               "position_ids": positions,
               "responses": torch.arange(6).view(2, 3)}
    out = align_sequences(tensors, alignment)
    assert out["input_ids"][:, :3].tolist() == [[2, 3, 4], [10, 11, 12]]  # each row's tokens from column 0
    assert out["position_ids"].tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]  # travel with them, then keep rising
    assert out["attention_mask"] is None and out["responses"].tolist() == [[0, 1], [3, 4]]


def test_rows_that_are_not_one_run_of_tokens_are_not_aligned():
    def alignment(mask, prompt_len, positions=None):
        positions = (mask.cumsum(-1) - 1).clamp(min=0) if positions is None else positions
        return find_alignment(mask, mask[:, prompt_len:], positions)

    ok = torch.tensor([[0, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    assert alignment(ok, 3) is not None
    assert alignment(torch.tensor([[0, 0, 1, 1], [0, 1, 1, 0]]), 2) is None  # row 0 has no prompt token
    assert alignment(torch.tensor([[1, 1, 1, 0, 1], [0, 1, 1, 1, 0]]), 3) is None  # a hole in row 0's response
    restart = torch.tensor([[0, 0, 1, 0, 0], [0, 1, 2, 3, 4]])  # row 0's positions restart inside its tokens
    assert alignment(ok, 3, restart) is None


@pytest.mark.parametrize("remove_padding", [False, True])
def test_aligned_rows_reach_causal_attention_with_no_mask(tiny_model_dir, monkeypatch, remove_padding):
    """The point of aligning: sdpa's causal kernel, not the masked one that computes the whole S x S product."""
    model = load_causal_lm(tiny_model_dir).eval()
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording_sdpa(*args, **kwargs):
        calls.append((kwargs.get("attn_mask") is None, kwargs.get("is_causal")))
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording_sdpa)
    with torch.no_grad():
        response_log_probs(model, ragged_batch(num_rows=4, seed=1), 1.0, False, remove_padding=remove_padding)
    assert calls and set(calls) == ({(True, True)} if remove_padding else {(False, False)})


def test_log_probs_equal_the_padded_forward_and_the_model_sees_fewer_columns(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir).eval()
    batch = ragged_batch(num_rows=6, seed=3)
    widths = []
    model.get_input_embeddings().register_forward_pre_hook(lambda _, args: widths.append(args[0].shape[1]))
    with torch.no_grad():
        padded = response_log_probs(model, batch, 0.7, True, remove_padding=False)
        trimmed = response_log_probs(model, batch, 0.7, True, remove_padding=True)
    mask = batch["response_mask"].bool()
    longest = (batch["attention_mask"][:, :12].sum(-1).max() + mask.sum(-1).max()).item()
    assert widths == [22, longest] and longest < 22
    for full, trim in zip(padded, trimmed):
        assert trim.shape == full.shape == (6, 10) and trim.dtype == torch.float32
        torch.testing.assert_close(trim[mask], full[mask], rtol=1e-5, atol=1e-5)
        assert (trim[:, mask.any(0).nonzero().max() + 1:] == 0).all()  # trimmed columns come back as zeros


@pytest.mark.parametrize("dynamic", [False, True])
def test_actor_and_critic_outputs_and_gradients_do_not_depend_on_remove_padding(tiny_model_dir, dynamic):
    extra = ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40",
             "critic.ppo_max_token_len_per_gpu=40"] if dynamic else []
    batch = ragged_batch(num_rows=8, seed=5)
    mask = batch["response_mask"].bool()
    results = {}
    for name, switch in (("on", ON), ("off", OFF)):
        actor, critic = build_actor(tiny_model_dir, switch + extra), build_critic(tiny_model_dir, switch + extra)
        log_probs = actor.compute_log_prob(batch)["old_log_probs"]
        values = critic.compute_values(batch)["values"]
        actor.update_actor(batch)
        grads = [p.grad.clone() for p in actor.model.parameters()]
        results[name] = (log_probs, values, grads)
    (lp_on, v_on, g_on), (lp_off, v_off, g_off) = results["on"], results["off"]
    torch.testing.assert_close(lp_on[mask], lp_off[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(v_on, v_off, rtol=1e-5, atol=1e-5)
    for a, b in zip(g_on, g_off):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
