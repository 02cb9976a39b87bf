"""hybridrl.rollout.engine."""
