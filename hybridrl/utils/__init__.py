"""hybridrl.utils."""
