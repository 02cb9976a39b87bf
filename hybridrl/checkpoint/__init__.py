"""hybridrl.checkpoint."""
