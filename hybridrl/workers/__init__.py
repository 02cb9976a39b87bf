"""hybridrl.workers."""
