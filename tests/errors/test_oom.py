"""oom_guard / translate_oom: a simulated CUDA OOM in each phase becomes an actionable PhaseOOMError."""

from __future__ import annotations

import re

import pytest
import torch

from hybridrl.config import load_config
from hybridrl.config import compat
from hybridrl.errors.oom import PhaseOOMError, oom_guard, suggest_overrides, translate_oom

PHASES = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor", "update_weights")
OVERRIDES = ["data.train_batch_size=64", "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.rollout.response_length=256",
             "actor_rollout_ref.actor.ppo_mini_batch_size=16", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
             "actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "actor_rollout_ref.actor.use_kl_loss=true",
             "critic.ppo_micro_batch_size_per_gpu=16"]
CPU = torch.device("cpu")
SUGGESTION = re.compile(r"^  (\S+)=(\S+)   \(now ", re.MULTILINE)


@pytest.fixture(scope="module")
def cfg():
    return load_config(OVERRIDES)


def raise_oom_in(phase: str, cfg) -> PhaseOOMError:
    original = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity ...")
    with pytest.raises(PhaseOOMError) as info:
        with oom_guard(phase, cfg, CPU):
            raise original
    assert info.value.__cause__ is original  # `raise ... from err`: the traceback keeps the real OOM
    return info.value


@pytest.mark.parametrize("phase", PHASES)
def test_each_phase_names_itself_memory_settings_and_loadable_overrides(phase, cfg):
    message = str(raise_oom_in(phase, cfg))
    assert message.startswith(f"CUDA out of memory in phase '{phase}'")
    assert "Memory: n/a" in message and "Tried to allocate 2.50 GiB" in message  # CPU: no figures
    settings = re.findall(r"(actor_rollout_ref\.[\w.]+|data\.[\w.]+|critic\.[\w.]+)=([^,\s]+)",
                          message.split("Settings in force: ")[1].splitlines()[0])
    assert len(settings) >= 2 and ("actor_rollout_ref.rollout.n", "8") in settings
    suggested = SUGGESTION.findall(message)
    assert len(suggested) >= (1 if phase == "update_weights" else 2)
    for key, value in suggested:  # every suggestion is a real key with a value the config accepts
        assert load_config(OVERRIDES + [f"{key}={value}"]) is not None


def test_values_are_computed_from_the_config(cfg):
    by_phase = {phase: {o.key: o.value for o in suggest_overrides(cfg, phase)} for phase in PHASES}
    # per-device mini = 16 prompts x n=8 = 128 rows; micro 32 -> 16 (still divides 128)
    assert by_phase["update_actor"]["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 16
    assert by_phase["gen"]["actor_rollout_ref.rollout.gpu_memory_utilization"] == pytest.approx(0.4)
    # unset log-prob micro batch falls back to the actor's 32 rows -> 16
    assert by_phase["old_log_prob"]["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == 16
    assert by_phase["ref"]["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] == 16
    assert by_phase["update_critic"]["critic.ppo_micro_batch_size_per_gpu"] == 8


def test_checkpointing_suggested_when_off():
    cfg = load_config(OVERRIDES + ["actor_rollout_ref.model.enable_gradient_checkpointing=false"])
    keys = [o.key for o in suggest_overrides(cfg, "update_actor")]
    assert keys[:2] == ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
                        "actor_rollout_ref.model.enable_gradient_checkpointing"]


def test_activation_offload_is_suggested_for_the_updates_until_it_is_on():
    cfg = load_config(OVERRIDES + ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
                                   "critic.ppo_micro_batch_size_per_gpu=1"])
    for phase, key in (("update_actor", "actor_rollout_ref.model"), ("update_critic", "critic.model")):
        assert {o.key: o.value for o in suggest_overrides(cfg, phase)}[f"{key}.enable_activation_offload"] is True
        on = load_config(OVERRIDES + [f"{key}.enable_activation_offload=true"])
        assert f"{key}.enable_activation_offload" not in {o.key for o in suggest_overrides(on, phase)}


def test_whole_copies_per_rank_are_told_to_shard():
    """fsdp_size=1 (a whole replica per rank) is the first thing after the micro batch to give back."""
    cfg = load_config(OVERRIDES + [f"{role}.fsdp_config.fsdp_size=1" for role in
                                   ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model")])
    for phase, key in (("update_actor", "actor_rollout_ref.actor"), ("ref", "actor_rollout_ref.ref"),
                       ("update_critic", "critic.model"), ("gen", "actor_rollout_ref.actor")):
        suggested = {o.key: o.value for o in suggest_overrides(cfg, phase)}
        assert suggested.get(f"{key}.fsdp_config.fsdp_size") == -1, phase
    assert "actor_rollout_ref.actor.fsdp_config.fsdp_size=1" in str(raise_oom_in("update_actor", cfg))
    assert not any("fsdp_size" in o.key for phase in PHASES for o in suggest_overrides(load_config(OVERRIDES), phase))


def test_offload_suggested_only_while_the_config_accepts_it(cfg, monkeypatch):
    key = "actor_rollout_ref.actor.fsdp_config.optimizer_offload"
    assert f"{key}=true" in str(translate_oom("gen", cfg, torch.OutOfMemoryError("oom"), CPU))
    monkeypatch.setitem(compat.NOT_IMPLEMENTED, key, ((False,), "refused"))
    assert key not in str(raise_oom_in("gen", cfg)).split("Try one")[1]  # a refused key is never suggested


def test_runtime_error_saying_out_of_memory_is_translated(cfg):
    with pytest.raises(PhaseOOMError, match="phase 'ref'"):
        with oom_guard("ref", cfg, CPU):
            raise RuntimeError("CUDA error: out of memory")


def test_other_errors_pass_through_untouched(cfg):
    original = ValueError("bad shape")
    with pytest.raises(ValueError) as info:
        with oom_guard("gen", cfg, CPU):
            raise original
    assert info.value is original
    with pytest.raises(RuntimeError, match="^shape mismatch$"):
        with oom_guard("gen", cfg, CPU):
            raise RuntimeError("shape mismatch")


def test_nested_guards_keep_the_innermost_phase(cfg):
    with pytest.raises(PhaseOOMError, match="phase 'ref'"):
        with oom_guard("step", cfg, CPU), oom_guard("ref", cfg, CPU):
            raise torch.OutOfMemoryError("CUDA out of memory.")


def test_user_facing_error_prints_message_first(cfg, capsys, monkeypatch):
    from hybridrl.errors import run_with_actionable_errors

    def step():
        with oom_guard("update_actor", cfg, CPU):
            raise torch.OutOfMemoryError("CUDA out of memory.")

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    assert run_with_actionable_errors(step) == 1
    err = capsys.readouterr().err
    assert err.startswith("hybridrl: PhaseOOMError: CUDA out of memory in phase 'update_actor'")
    assert "Try one of" in err and "Traceback" not in err and "HYDRA_FULL_ERROR=1" in err
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # verl's opt-in: the traceback too
    assert run_with_actionable_errors(step) == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.gpu
def test_real_cuda_oom_reports_memory_figures(cfg):
    device = torch.device("cuda")
    total = torch.cuda.get_device_properties(device).total_memory
    with pytest.raises(PhaseOOMError) as info:
        with oom_guard("update_actor", cfg, device):
            torch.empty(2 * total, dtype=torch.uint8, device=device)
    message = str(info.value)
    assert re.search(r"Memory on cuda: allocated [0-9.]+ GiB, reserved [0-9.]+ GiB, peak allocated [0-9.]+ GiB, "
                     r"total [0-9.]+ GiB", message)
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16" in message


def test_kept_decode_graphs_are_offered_once_the_bigger_savings_are_taken():
    """keep_decode_graphs holds the graphs' activation pool through training: a late, cheap suggestion."""
    taken = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "actor_rollout_ref.model.enable_gradient_checkpointing=true",
             "actor_rollout_ref.ref.fsdp_config.param_offload=true"]
    cfg = load_config(OVERRIDES + taken)
    suggested = {o.key: o.value for o in suggest_overrides(cfg, "update_actor")}
    assert suggested["actor_rollout_ref.rollout.keep_decode_graphs"] is False
    assert "actor_rollout_ref.rollout.keep_decode_graphs=true" in str(raise_oom_in("update_actor", cfg))
    off = load_config(OVERRIDES + taken + ["actor_rollout_ref.rollout.keep_decode_graphs=false"])
    assert "actor_rollout_ref.rollout.keep_decode_graphs" not in {o.key for o in suggest_overrides(off, "update_actor")}


def test_hybridrl_messages_that_mention_memory_are_not_device_ooms(cfg):
    """A dead process's error lists host memory among its causes; on its own that is no CUDA OOM."""
    from hybridrl.distributed.errors import WorkerDiedError, WorkerError
    from hybridrl.rewards.manager import RewardFunctionError
    from hybridrl.errors.oom import is_oom

    died = WorkerDiedError("actor", 0, "update_actor", "killed by SIGKILL")
    assert "out of host memory" in str(died) and not is_oom(died)
    assert not is_oom(RewardFunctionError("a reward worker process died: ... ran out of memory"))
    assert not is_oom(RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 8 GB"))
    rank_oom = WorkerError("actor", 1, "update_actor", "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert is_oom(rank_oom)  # a rank's own CUDA OOM, carried by our error, still gets the phase's advice
    with pytest.raises(PhaseOOMError, match="phase 'update_actor'"):
        with oom_guard("update_actor", cfg, CPU):
            raise rank_oom
    assert is_oom(RuntimeError("CUDA error: out of memory")) and is_oom(RuntimeError("HIP out of memory."))
