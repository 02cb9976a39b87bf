"""Models over HTTP: `hybridrl serve` (a vLLM-style pooling server) and its client, and the generative reward
model's server (generate_server.py: SGLang's /generate and OpenAI's chat and completions routes)."""

from hybridrl.serving.client import PoolingClient, RemoteScoringError, redact_url

__all__ = ["PoolingClient", "RemoteScoringError", "redact_url"]
