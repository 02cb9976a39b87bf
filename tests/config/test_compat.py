"""Older verl spellings, the NOT_IMPLEMENTED table and the replaced rollout engines."""

from __future__ import annotations

import pytest

from hybridrl.config import ConfigError, load_config
from hybridrl.config.compat import NOT_IMPLEMENTED
from hybridrl.config.index import schema_index
from hybridrl.config.validate import validate_run


def test_warmup_style_becomes_lr_scheduler_type(tmp_path):
    cfg = load_config(["actor_rollout_ref.actor.optim.warmup_style=cosine", "critic.optim.warmup_style=null"])
    assert cfg.actor_rollout_ref.actor.optim.lr_scheduler_type == "cosine"
    assert cfg.critic.optim.lr_scheduler_type == "constant"  # null meant "unset" in verl
    with pytest.raises(ConfigError, match="two spellings of one key"):
        load_config(["actor_rollout_ref.actor.optim.warmup_style=cosine",
                     "actor_rollout_ref.actor.optim.lr_scheduler_type=constant"])  # fmt: skip


def test_top_level_ray_init_moves_under_ray_kwargs(tmp_path):
    cfg = load_config(["ray_init.num_cpus=4", "+ray_init.address=auto"])
    assert cfg.ray_kwargs.ray_init == {"num_cpus": 4, "address": "auto"}
    path = tmp_path / "old.yaml"
    path.write_text("ray_init:\n  num_cpus: 2\n  timeline_json_file: /tmp/t.json\n")
    cfg = load_config(config_file=str(path))
    assert cfg.ray_kwargs.ray_init == {"num_cpus": 2} and cfg.ray_kwargs.timeline_json_file == "/tmp/t.json"


def test_old_yaml_spelling_overridden_by_new_cli_spelling(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("actor_rollout_ref:\n  actor:\n    optim:\n      warmup_style: cosine\n")
    cfg = load_config(["actor_rollout_ref.actor.optim.lr_scheduler_type=constant"], config_file=str(path))
    assert cfg.actor_rollout_ref.actor.optim.lr_scheduler_type == "constant"


@pytest.mark.parametrize("role", ["actor_rollout_ref.actor", "critic"])
def test_optim_clip_grad_is_the_roles_grad_clip(role):
    def value(cfg, path):
        for part in path.split("."):
            cfg = getattr(cfg, part)
        return cfg

    cfg = load_config([f"{role}.optim.clip_grad=0.25"])
    assert value(cfg, f"{role}.grad_clip") == 0.25
    cfg = load_config([f"{role}.grad_clip=2.0"])
    assert value(cfg, f"{role}.optim.clip_grad") == 2.0
    with pytest.raises(ConfigError, match="two spellings of one setting"):
        load_config([f"{role}.grad_clip=2.0", f"{role}.optim.clip_grad=0.5"])


@pytest.mark.parametrize(("role", "fsdp"), [("actor_rollout_ref.actor", "actor_rollout_ref.actor.fsdp_config"),
                                           ("actor_rollout_ref.ref", "actor_rollout_ref.ref.fsdp_config"),
                                           ("critic", "critic.model.fsdp_config")])
def test_ulysses_spellings_agree_and_are_accepted(role, fsdp):
    def value(cfg, path):
        for part in path.split("."):
            cfg = getattr(cfg, part)
        return cfg

    key = "ulysses_sequence_parallel_size"
    for given in (f"{role}.{key}=2", f"{fsdp}.{key}=2"):
        cfg = load_config([given])
        assert (value(cfg, f"{role}.{key}"), value(cfg, f"{fsdp}.{key}")) == (2, 2), given
    with pytest.raises(ConfigError, match="two spellings of one setting"):
        load_config([f"{role}.{key}=2", f"{fsdp}.{key}=4"])


def test_reference_ulysses_size_follows_the_actors():
    for given in ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=4",
                  "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=4"):
        assert load_config([given]).actor_rollout_ref.ref.ulysses_sequence_parallel_size == 4, given
    cfg = load_config(["actor_rollout_ref.actor.ulysses_sequence_parallel_size=4",
                       "actor_rollout_ref.ref.ulysses_sequence_parallel_size=2"])  # fmt: skip
    assert cfg.actor_rollout_ref.ref.ulysses_sequence_parallel_size == 2


def test_reward_manager_spellings():
    assert load_config(["reward_model.reward_manager=dapo"]).reward_manager.name == "dapo"
    cfg = load_config(["reward_manager.name=batch"])
    assert cfg.reward_model.reward_manager == "batch" and cfg.reward_manager.name == "batch"
    with pytest.raises(ConfigError, match="two spellings of one setting"):
        load_config(["reward_model.reward_manager=dapo", "reward_manager.name=batch"])


def test_remove_previous_ckpt_in_save_keeps_one():
    cfg = load_config(["+trainer.remove_previous_ckpt_in_save=true"])
    assert (cfg.trainer.max_actor_ckpt_to_keep, cfg.trainer.max_critic_ckpt_to_keep) == (1, 1)
    with pytest.raises(ConfigError, match="max_actor_ckpt_to_keep=1"):
        load_config(["trainer.remove_previous_ckpt_in_save=true", "trainer.max_actor_ckpt_to_keep=3"])


def test_v04_sync_mode_and_fsdp_strategy_accepted():
    cfg = load_config(["actor_rollout_ref.rollout.mode=sync", "actor_rollout_ref.actor.strategy=fsdp"])
    assert cfg.actor_rollout_ref.rollout.mode == "sync" and cfg.actor_rollout_ref.actor.strategy == "fsdp"


REWARD_MODEL_SP = ("sequence parallelism for the reward model is not implemented; the actor, reference and critic "
                   "support it")


@pytest.mark.parametrize(
    ("override", "phrase"),
    [
        ("critic.model.lora_rank=8", "LoRA arrives in a later hybridrl release"),
        ("actor_rollout_ref.actor.strategy=megatron", "Megatron, TorchTitan, VeOmni and fsdp_turbo engines are not implemented"),
        ("algorithm.adv_estimator=reinforce", "this advantage estimator is not implemented in hybridrl yet; use one of"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode", "this policy loss is not implemented"),
        ("trainer.esi_redundant_time=10", "ESI"),
        ("actor_rollout_ref.model.use_liger=true", "Liger kernels are not implemented"),
        ("critic.model.fsdp_config.wrap_policy.min_num_params=1000", "size-based FSDP wrapping is not implemented"),
        ("actor_rollout_ref.actor.fsdp_config.full_determinism=true", "full_determinism) are not implemented"),
        ("reward_model.ulysses_sequence_parallel_size=2", REWARD_MODEL_SP),
        ("reward_model.model.fsdp_config.ulysses_sequence_parallel_size=2", REWARD_MODEL_SP),
    ],
)
def test_not_implemented_values_are_refused(override, phrase):
    with pytest.raises(ConfigError) as err:
        load_config([override])
    key, value = override.lstrip("+").split("=")
    assert f"{key}=" in str(err.value) and phrase in str(err.value)


def test_every_not_implemented_key_exists_and_its_default_is_accepted():
    defaults = load_config()
    for path, (accepted, _) in NOT_IMPLEMENTED.items():
        assert path in schema_index(), path
        node = defaults
        for part in path.split("."):
            node = getattr(node, part)
        assert node in accepted, path


# verl's examples/grpo_trainer/run_qwen3_5_27b_fsdp.sh (August 2026) sets the policy beside both between-phase offloads
VERL_OFFLOAD_KEYS = [
    "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.actor.fsdp_config.offload_policy=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True", "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.ref.strategy=fsdp2", "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "actor_rollout_ref.ref.fsdp_config.offload_policy=True", "actor_rollout_ref.model.enable_activation_offload=True",
    "algorithm.adv_estimator=gae", "critic.fsdp.offload_policy=True", "critic.model.enable_activation_offload=True",
    "trainer.n_gpus_per_node=8", "actor_rollout_ref.actor.use_dynamic_bsz=true", "critic.use_dynamic_bsz=true",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true", "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
]


def test_verls_offload_keys_validate_as_its_scripts_set_them():
    """offload_policy supersedes param_offload / optimizer_offload (as in verl), so the three together are no
    conflict; the critic's August-tree group spelling (critic.fsdp) reaches critic.model.fsdp_config."""
    cfg = load_config(VERL_OFFLOAD_KEYS)
    validate_run(cfg, "cuda", 8)
    fsdp = [cfg.actor_rollout_ref.actor.fsdp_config, cfg.actor_rollout_ref.ref.fsdp_config,
            cfg.critic.model.fsdp_config]
    assert all(config.offload_policy for config in fsdp)
    assert cfg.actor_rollout_ref.model.enable_activation_offload and cfg.critic.model.enable_activation_offload
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.fsdp_config.offload_policy='maybe' has the wrong "
                                          r"type: expected bool"):
        load_config(["actor_rollout_ref.actor.fsdp_config.offload_policy=maybe"])


def test_accepted_non_defaults_pass():
    cfg = load_config(["actor_rollout_ref.model.use_fused_kernels=true", "algorithm.adv_estimator=rloo_vectorized",
                       "actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "actor_rollout_ref.rollout.name=hf"])  # fmt: skip
    assert cfg.actor_rollout_ref.actor.use_fused_kernels is True  # follows model.use_fused_kernels


@pytest.mark.parametrize("loss_mode", ["sapo", "cispo", "geo_mean", "dppo_tv", "dppo_kl", "gpg", "dro", "clip_cov",
                                       "kl_cov"])
def test_verls_policy_losses_are_accepted(loss_mode):
    cfg = load_config([f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}"])
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == loss_mode


@pytest.mark.parametrize("estimator", ["opo", "gpg", "grpo_passk", "gdpo", "optimal_token_baseline",
                                       "tir_optimal_token_baseline"])
def test_verls_estimators_are_accepted(estimator):
    assert load_config([f"algorithm.adv_estimator={estimator}"]).algorithm.adv_estimator == estimator


def test_registered_names_pass_the_config_when_external_modules_are_named(monkeypatch):
    """A name registered by a user module is only known once the module is imported (at the registry
    lookup), so with VERL_USE_EXTERNAL_MODULES set the config leaves these two keys to the registry."""
    overrides = ["actor_rollout_ref.actor.policy_loss.loss_mode=my_loss", "algorithm.adv_estimator=my_estimator"]
    monkeypatch.delenv("VERL_USE_EXTERNAL_MODULES", raising=False)
    with pytest.raises(ConfigError, match="register yours"):
        load_config(overrides)
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "my_algorithms")
    cfg = load_config(overrides)
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "my_loss"
