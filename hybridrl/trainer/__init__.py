"""hybridrl.trainer."""
