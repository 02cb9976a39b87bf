"""hybridrl: RL post-training of LLMs with a hybrid engine and verl-compatible configuration."""

__version__ = "0.1.0"

__all__ = ["__version__"]
