"""hybridrl.config."""
