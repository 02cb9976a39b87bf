"""hybridrl.rewards."""
