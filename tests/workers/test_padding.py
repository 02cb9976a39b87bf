"""use_remove_padding: all-padding columns trimmed per micro-batch, outputs equal to the padded forward."""

from __future__ import annotations

import pytest
import torch

from hybridrl.models.hf import load_causal_lm
from hybridrl.workers.forward import response_log_probs
from hybridrl.workers.padding import Trim, find_trim, pad_responses, trim_sequences
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
