"""hybridrl.data."""
