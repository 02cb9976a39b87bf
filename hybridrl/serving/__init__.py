"""Remote scoring over HTTP: `hybridrl serve` (a vLLM-style pooling server) and its client."""

from hybridrl.serving.client import PoolingClient, RemoteScoringError, redact_url

__all__ = ["PoolingClient", "RemoteScoringError", "redact_url"]
