"""hybridrl.models."""
