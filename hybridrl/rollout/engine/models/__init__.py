"""hybridrl.rollout.engine.models."""
