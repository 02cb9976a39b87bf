"""hybridrl.data.preprocess."""
