"""Schema of `algorithm.*`, `trainer.*`, `ray_kwargs.*`, `global_profiler.*` and `transfer_queue.*`."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.fields import section, setting
from hybridrl.config.schema_async import RolloutCorrectionConfig, TrainerV1Config

LOGGERS = ("console", "file", "wandb", "mlflow", "swanlab", "vemlp_wandb", "tensorboard", "clearml", "trackio")


@dataclass
class KlControlConfig:
    """KL-in-reward coefficient controller."""

    type: str = setting("fixed", "fixed or adaptive (Ziegler et al. 2019).", choices=("fixed", "adaptive"))
    kl_coef: float = setting(0.001, "KL-in-reward coefficient (initial value when adaptive).")
    horizon: int = setting(10000, "Adaptive controller horizon.")
    target_kl: float = setting(0.1, "Adaptive controller target KL.")


@dataclass
class PfPpoConfig:
    """Policy-filtration PPO resampling."""

    reweight_method: str = setting("pow", "Weighting of samples.", choices=("pow", "max_min", "max_random"))
    weight_pow: float = setting(2.0, "Exponent of the pow method.")


@dataclass
class FilterGroupsConfig:
    """DAPO dynamic sampling (verl default: null, i.e. off)."""

    enable: bool = setting(False, "Drop groups whose responses all score the same.", plus=True)
    metric: str | None = setting(None, "Metric compared within a group (acc, score, seq_reward).", plus=True)
    max_num_gen_batches: int = setting(0, "Generation batches per step; <= 0 = unlimited.", plus=True)
    max_inflight_gen_batches: int = setting(1, "Generation batches in flight at once (verl's August-2026 tree).", plus=True)


@dataclass
class AlgorithmConfig:
    """Advantage estimation and KL-in-reward."""

    gamma: float = setting(1.0, "Discount factor.")
    lam: float = setting(1.0, "GAE lambda.")
    adv_estimator: str = setting(
        "gae", "gae|grpo|rloo|reinforce_plus_plus|reinforce_plus_plus_baseline|remax|opo|gpg|grpo_passk|gdpo "
        "(+ grpo_vectorized, rloo_vectorized), or a name registered with @register_adv_est (docs/config.md).")
    norm_adv_by_std_in_grpo: bool = setting(True, "Divide GRPO advantages by the group std (false = Dr.GRPO).")
    gdpo_reward_keys: list[str] | None = setting(
        None, "gdpo: the reward components (keys of compute_score's returned dict) normalised one by one.", plus=True)
    gdpo_reward_weights: list[float] | None = setting(
        None, "gdpo: one weight per gdpo_reward_keys entry; null = all 1.", plus=True)
    use_kl_in_reward: bool = setting(False, "Subtract a KL-to-reference penalty from the rewards; needs the ref model.")
    kl_penalty: str = setting("kl", "KL estimator in the reward: kl|k1|abs|mse|k2|low_var_kl|k3.")
    kl_ctrl: KlControlConfig = section(KlControlConfig, "KL-in-reward controller.")
    use_pf_ppo: bool = setting(False, "Policy-filtration PPO.")
    pf_ppo: PfPpoConfig = section(PfPpoConfig, "PF-PPO settings.")
    filter_groups: FilterGroupsConfig = section(FilterGroupsConfig, "DAPO dynamic sampling.", plus=True)
    rollout_correction: RolloutCorrectionConfig = section(RolloutCorrectionConfig, "Rollout correction.")


@dataclass
class TrainerConfig:
    """The training loop: steps, logging, checkpoints, devices."""

    balance_batch: bool = setting(True, "Reorder rows so every device gets a similar token count.")
    total_epochs: int = setting(30, "Passes over the training set.")
    total_training_steps: int | None = setting(None, "Stop after this many steps; null = epochs x batches.")
    project_name: str = setting("verl_examples", "Project name for trackers and checkpoint paths.")
    experiment_name: str = setting("gsm8k", "Run name for trackers and checkpoint paths.")
    logger: list[str] = setting(
        ["console", "file"],
        "hybridrl default [console, file] (verl: [console, wandb], which needs an account); a bare string is wrapped.",
    )
    log_val_generations: int = setting(0, "Validation samples logged as text per validation.")
    rollout_data_dir: str | None = setting(None, "Dump training rollouts as jsonl here.")
    validation_data_dir: str | None = setting(None, "Dump validation generations as jsonl here.")
    nnodes: int = setting(1, "Nodes.")
    n_gpus_per_node: int | None = setting(
        None, "hybridrl default null = all visible devices (1 on CPU); verl's 8 fails on a 1-GPU box."
    )
    save_freq: int = setting(-1, "Save a checkpoint every N steps (and at the end); -1 = never.")
    esi_redundant_time: float = setting(0, "Seconds before instance expiry to save (ESI).")
    resume_mode: str = setting("auto", "auto = latest checkpoint if any.", choices=("auto", "disable", "resume_path"))
    resume_from_path: str | None = setting(None, "Checkpoint dir (…/global_step_N) for resume_mode=resume_path.")
    val_before_train: bool = setting(True, "Validate before the first step.")
    val_only: bool = setting(False, "Validate once and stop.")
    test_freq: int = setting(-1, "Validate every N steps (and at the end); -1 = never.")
    critic_warmup: int = setting(0, "Steps that train only the critic.")
    default_hdfs_dir: str | None = setting(None, "Mirror checkpoints to HDFS.")
    del_local_ckpt_after_load: bool = setting(False, "Delete the local checkpoint after resuming (verl: copies from HDFS); no effect (checkpoints are local; default_hdfs_dir is refused).")
    default_local_dir: str = setting(
        "checkpoints/verl_examples/gsm8k",
        "Checkpoint root.",
        ref="checkpoints/${trainer.project_name}/${trainer.experiment_name}",
    )
    max_actor_ckpt_to_keep: int | None = setting(None, "Keep the newest N actor checkpoints; null = all.")
    max_critic_ckpt_to_keep: int | None = setting(None, "Keep the newest N critic checkpoints; null = all.")
    remove_previous_ckpt_in_save: bool = setting(False, "Deprecated: true = max_*_ckpt_to_keep=1.", plus=True)
    ray_wait_register_center_timeout: int = setting(300, "Seconds to wait for Ray to place each worker pool.")
    device: str = setting(
        "auto", "hybridrl default auto = cuda if available else cpu (verl: cuda; its npu is refused).",
        choices=("auto", "cuda", "cpu", "npu")
    )
    use_legacy_worker_impl: str = setting("auto", "verl worker generation; no effect (one implementation here).", choices=("auto", "enable", "disable"))
    seed: int = setting(42, "hybridrl: seeds model initialisation, shuffling fallbacks and sampling.")
    launcher: str = setting("auto", "hybridrl: auto = local on one node, ray on several.", choices=("auto", "local", "ray"))
    max_consecutive_nonfinite_steps: int | None = setting(
        5, "hybridrl: stop with an error naming the first non-finite quantity after N steps in a row that skipped "
           "optimizer steps for NaN/inf values; 0 or null = never (each such step is still logged).")
    use_v1: bool = setting(True, "verl's switch to its V1 trainer; either value (hybridrl has one trainer, whose "
                                 "modes trainer.v1.trainer_mode selects).")
    v1: TrainerV1Config = section(TrainerV1Config, "verl's V1 trainer modes (sync, colocate_async, separate_async).")


@dataclass
class RayKwargsConfig:
    """Arguments of ray.init (Ray launcher only)."""

    ray_init: dict = setting({"num_cpus": None}, "kwargs of ray.init (open dict; older spelling: top-level ray_init).")
    timeline_json_file: str | None = setting(None, "Write Ray's task timeline (Chrome trace) here when the run ends.")


@dataclass
class GlobalProfilerConfig:
    """Profiling of selected steps."""

    tool: str | None = setting(None, "torch (torch.profiler traces + top-op tables), torch_memory (CUDA allocator "
                               "snapshots) or nsys (Nsight Systems capture ranges + NVTX ranges; run under `nsys "
                               "profile --capture-range=cudaProfilerApi`) of the controller and every worker rank; "
                               "null = off. npu: refused.")
    steps: list[int] | None = setting(None, "Steps to profile (1-based, e.g. [2,3]).")
    profile_continuous_steps: bool = setting(False, "Profile consecutive listed steps as one trace.")
    save_path: str = setting("outputs/profile", "Where profiles go: <save_path>/step_<N>/<process>.*.")
    global_tool_config: dict = setting({}, "Per-tool options (open dict): torch.contents (cpu, cuda, memory, shapes, "
                                           "stack), torch.discrete (one profile per phase), "
                                           "torch_memory.trace_alloc_max_entries, nsys.discrete (one capture range "
                                           "per phase), nsys.worker_nsight_options (the nsys command's options).")
    relocate_results: bool = setting(False, "Either value: hybridrl writes every trace of a step into "
                                            "<save_path>/step_<N>/ itself (no engine sub-folders), as true does in verl.")
    finish_hook_cmd: str | None = setting(None, "Command run when profiling ends (verl); not implemented: null only.")
    finish_hook_all_ranks: bool = setting(False, "Run finish_hook_cmd on every rank (verl).")
    finish_hook_ranks: list[int] = setting([], "Ranks running finish_hook_cmd (verl).")


@dataclass
class TransferQueueConfig:
    """Decoupled data plane."""

    enable: bool = setting(False, "Move batches through the transfer queue.")
    metrics: dict = setting({}, "Transfer-queue metrics export (open dict: enabled, port).")
    backend: dict = setting({}, "Transfer-queue storage backend (open dict: storage_backend, SimpleStorage, MooncakeStore).")


@dataclass
class SkipTargetConfig:
    """Reuse dumped generations instead of generating (verl's `skip.*`, August-2026 tree)."""

    enable: bool = setting(False, "Load cached generations instead of generating (not implemented: false only).")
    dump_dir: str = setting("~/.verl/rollout_dump", "Where generations are cached.")
    steps: list[int] = setting([], "Steps that use the cache.")
    action: str = setting("cache", "What to do at those steps.")


@dataclass
class SkipConfig:
    """Skipping phases with cached results."""

    rollout: SkipTargetConfig = section(SkipTargetConfig, "Cached training generations.")
    rollout_tq: SkipTargetConfig = section(SkipTargetConfig, "Cached generations through the transfer queue.")
    async_rollout: SkipTargetConfig = section(SkipTargetConfig, "Cached generations of the async trainer.")
