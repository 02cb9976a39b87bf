"""verl-compatible configuration: schema (defaults + docs), loading, CLI overrides, compatibility, validation."""

from hybridrl.config.batch_rules import resolve_micro_batch_size_per_gpu
from hybridrl.config.errors import ConfigError
from hybridrl.config.argv import parse_cli_args
from hybridrl.config.load import config_to_dict, config_to_yaml, load_config
from hybridrl.config.placement import validate_placement
from hybridrl.config.roles import critic_enabled, ref_enabled, rollout_backend_name
from hybridrl.config.schema import HybridRLConfig
from hybridrl.config.validate import validate_config

__all__ = [
    "ConfigError",
    "HybridRLConfig",
    "config_to_dict",
    "config_to_yaml",
    "critic_enabled",
    "load_config",
    "parse_cli_args",
    "ref_enabled",
    "resolve_micro_batch_size_per_gpu",
    "rollout_backend_name",
    "validate_config",
    "validate_placement",
]
