"""hybridrl.rollout."""
