"""hybridrl.logging."""
