"""hybridrl.algorithms."""
