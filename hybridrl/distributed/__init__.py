"""hybridrl.distributed."""
