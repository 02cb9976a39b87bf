"""The whole configuration: nested dataclasses whose attribute names are verl's key names."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.fields import section, setting
from hybridrl.config.schema_actor import ActorConfig, RefConfig
from hybridrl.config.schema_data import DataConfig
from hybridrl.config.schema_distillation import DistillationConfig
from hybridrl.config.schema_model import ModelConfig
from hybridrl.config.schema_reward import (
    CriticConfig,
    CustomRewardFunctionConfig,
    RewardManagerConfig,
    RewardModelConfig,
)
from hybridrl.config.schema_rollout import RolloutConfig
from hybridrl.config.schema_trainer import (
    AlgorithmConfig,
    GlobalProfilerConfig,
    RayKwargsConfig,
    SkipConfig,
    TrainerConfig,
    TransferQueueConfig,
)


@dataclass
class ActorRolloutRefConfig:
    """The policy model and the three roles built from it."""

    hybrid_engine: bool = setting(True, "Training and generation share devices (the only mode, as in verl).")
    nccl_timeout: int = setting(600, "Seconds before a collective times out.")
    model: ModelConfig = section(ModelConfig, "The policy's HF model.")
    actor: ActorConfig = section(ActorConfig, "The trained policy.")
    ref: RefConfig = section(RefConfig, "The frozen reference policy.")
    rollout: RolloutConfig = section(RolloutConfig, "Generation.")


@dataclass
class HybridRLConfig:
    """Everything a run needs. Build it with `load_config` so `${...}` defaults follow the keys they name."""

    data: DataConfig = section(DataConfig, "Datasets and batch size.")
    actor_rollout_ref: ActorRolloutRefConfig = section(ActorRolloutRefConfig, "Policy model, actor, ref, rollout.")
    critic: CriticConfig = section(CriticConfig, "Value model.")
    reward_model: RewardModelConfig = section(RewardModelConfig, "Reward model and reward runtime.")
    reward_manager: RewardManagerConfig = section(RewardManagerConfig, "Reward manager.")
    custom_reward_function: CustomRewardFunctionConfig = section(CustomRewardFunctionConfig, "User reward function.")
    algorithm: AlgorithmConfig = section(AlgorithmConfig, "Advantages and KL.")
    trainer: TrainerConfig = section(TrainerConfig, "Training loop.")
    ray_kwargs: RayKwargsConfig = section(RayKwargsConfig, "Ray settings.")
    global_profiler: GlobalProfilerConfig = section(GlobalProfilerConfig, "Profiling.")
    transfer_queue: TransferQueueConfig = section(TransferQueueConfig, "Transfer queue.")
    model_engine: str = setting(
        "dp", "verl's engine group (a config-group choice: model_engine=megatron composes the Megatron files); "
        "dp = FSDP, the one hybridrl implements.", plus=True,
    )
    distillation: DistillationConfig = section(DistillationConfig, "On-policy distillation (verl's August-2026 tree).")
    skip: SkipConfig = section(SkipConfig, "Cached phases (verl's August-2026 tree).")
