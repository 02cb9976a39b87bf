"""Interactions: simulated users that answer the model between turns of the tool agent loop (verl's January-2026
`verl.interactions`, kept here after verl 0.8 removed them). Configure with
`actor_rollout_ref.rollout.multi_turn.interaction_config_path`; rows pick one with
`extra_info.interaction_kwargs.name`. See docs/agentic.md."""

from hybridrl.rollout.interactions.base import BaseInteraction
from hybridrl.rollout.interactions.gsm8k import Gsm8kInteraction
from hybridrl.rollout.interactions.registry import load_interactions

__all__ = ["BaseInteraction", "Gsm8kInteraction", "load_interactions"]
