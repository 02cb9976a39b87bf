"""`hybridrl train --help`: the usage, the overrides most runs set (with their defaults and doc lines from the
schema), and where the rest is documented."""

from __future__ import annotations

HELP_FLAGS = ("-h", "--help")

# The keys a verl GSM8K script sets, in the order a reader meets them (reference/verl.md §3).
COMMON_OVERRIDES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("data", ("data.train_files", "data.val_files", "data.train_batch_size", "data.max_prompt_length",
              "data.max_response_length", "data.filter_overlong_prompts", "data.truncation")),
    ("model and algorithm", ("actor_rollout_ref.model.path", "algorithm.adv_estimator",
                             "actor_rollout_ref.model.lora_rank", "critic.model.path")),
    ("actor", ("actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.actor.ppo_mini_batch_size",
               "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "actor_rollout_ref.actor.use_kl_loss",
               "actor_rollout_ref.actor.kl_loss_coef", "actor_rollout_ref.actor.use_dynamic_bsz")),
    ("rollout", ("actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.n",
                 "actor_rollout_ref.rollout.gpu_memory_utilization",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu")),
    ("reward", ("custom_reward_function.path", "custom_reward_function.name", "reward_model.enable")),
    ("trainer", ("trainer.total_epochs", "trainer.total_training_steps", "trainer.n_gpus_per_node",
                 "trainer.nnodes", "trainer.device", "trainer.logger", "trainer.test_freq", "trainer.save_freq",
                 "trainer.default_local_dir", "trainer.resume_mode", "trainer.log_val_generations")),
)

TRAIN_USAGE = """usage: hybridrl train [--config FILE | --config-path DIR --config-name NAME] [key=value ...]
       python -m hybridrl.trainer.main_ppo [same arguments]

Train a policy with PPO, GRPO, RLOO, REINFORCE++ or ReMax. Arguments are verl's: `a.b=1` sets a key, `+a.b=1`
adds one to an open dict, `++a.b=1` adds or sets, `~a.b` deletes; lists as `'[0,1]'`. An unknown key is an error
with a did-you-mean. Errors print without a traceback; set HYDRA_FULL_ERROR=1 to see it.

options:
  -h, --help            show this help and exit
  --config FILE         a YAML file of keys (a verl config dump loads as is); overrides apply on top
  --config-path DIR --config-name NAME
                        a Hydra-style config file, as verl's scripts pass it
"""

TRAIN_EPILOG = """
every key with its default and doc line:  hybridrl print-config --docs
check a run without starting it:          hybridrl print-config --validate key=value ...
differences from verl's defaults:          docs/config.md
"""


def _default_and_doc(path: str) -> tuple[str, str]:
    from hybridrl.config.index import config_tree, get_in, schema_index
    from hybridrl.config.schema import HybridRLConfig

    spec = schema_index()[path]
    default = spec.ref if spec.ref else get_in(config_tree(HybridRLConfig()), path)
    return str(default), spec.doc


def train_help() -> str:
    """The text `hybridrl train --help` prints: usage, the common overrides (key=default and doc), pointers."""
    lines = [TRAIN_USAGE, "common overrides (key=default):"]
    for group, keys in COMMON_OVERRIDES:
        lines.append(f"  {group}")
        for key in keys:
            default, doc = _default_and_doc(key)
            lines.append(f"    {key}={default}")
            lines.append(f"        {doc}")
    return "\n".join(lines) + "\n" + TRAIN_EPILOG


def wants_help(argv: list[str]) -> bool:
    """`-h`/`--help` anywhere among the arguments (a key=value override never looks like either)."""
    return any(arg in HELP_FLAGS for arg in argv)
