"""The reward role: decode responses and score them with rule rewards or a custom function.

Scores are placed on the last valid response token (`token_level_scores`), as verl's naive manager.
"""

from __future__ import annotations

import torch

from hybridrl.config.role_devices import is_remote
from hybridrl.config.schema import HybridRLConfig
from hybridrl.models.hf import batch_decode
from hybridrl.rewards.manager import place_scores, score_batch
from hybridrl.rewards.pool import ScoreFnSpec, ScoringPool
from hybridrl.utils.batch import Batch
from hybridrl.workers.rollout import unpadded_rows


def score_fn_spec(cfg: HybridRLConfig) -> ScoreFnSpec:
    """`custom_reward_function.path/name` when set (with reward_kwargs), else the built-in table."""
    custom = cfg.custom_reward_function
    if not custom.path:
        return ScoreFnSpec()
    kwargs = dict(getattr(custom, "reward_kwargs", None) or {})
    kwargs.update(getattr(cfg.reward_model, "reward_kwargs", None) or {})
    return ScoreFnSpec(custom.path, custom.name or "compute_score", kwargs)


def decode_responses(tokenizer, batch: Batch) -> list[str]:
    """Each response's tokens (where response_mask is set) as text; only real tokens become Python ints."""
    return batch_decode(tokenizer, unpadded_rows(batch["responses"], batch["response_mask"]), skip_special_tokens=True)


def reward_model_devices(cfg: HybridRLConfig, device: torch.device) -> list[torch.device]:
    """Where an in-process RM runs (the controller's process): on CUDA one replica per GPU of
    `reward_model.device_ids` (this node's indices), else on the controller's GPU; on CPU the CPU."""
    if device.type != "cuda":
        return [device]
    ids = cfg.reward_model.device_ids
    return [torch.device("cuda", device.index or 0)] if ids is None else [torch.device("cuda", i) for i in ids]


def build_reward_model(cfg: HybridRLConfig, tokenizer, device: torch.device = torch.device("cpu")):
    """verl's `reward_model.enable`: an HF token-classification RM in process (on `reward_model_devices`), or a
    remote pooling endpoint."""
    from hybridrl.models.hf import import_external_lib, load_tokenizer
    from hybridrl.workers.precision import resolve_precision
    from hybridrl.workers.reward_model import RewardModelWorker

    rm = cfg.reward_model
    remote = is_remote(rm.type, rm.model.path)
    devices = reward_model_devices(cfg, device)
    # frozen: loaded in its compute dtype (verl loads the RM in bf16), bf16 on GPU by default, fp32 on CPU
    dtype = resolve_precision(rm.model.fsdp_config, devices[0], "reward_model.model.fsdp_config").compute
    if not remote:
        import_external_lib(rm.model.external_lib, "reward_model.model.external_lib")
    trust = rm.model.trust_remote_code
    rm_tokenizer = tokenizer if remote else load_tokenizer(rm.model.path, key="reward_model.model.path",
                                                           trust_remote_code=trust)
    return RewardModelWorker(rm.model.path, tokenizer=rm_tokenizer, input_tokenizer=None if remote else tokenizer,
                             micro_batch_size=rm.micro_batch_size_per_gpu or 8, remote=remote,
                             max_tokens=rm.forward_max_token_len_per_gpu if rm.use_dynamic_bsz else None,
                             devices=[] if remote else devices, dtype=dtype,
                             max_length=rm.max_length, trust_remote_code=trust)


class RewardWorker:
    def __init__(self, cfg: HybridRLConfig, tokenizer, device: torch.device = torch.device("cpu")):
        """`device`: the controller's, where an in-process reward model runs unless reward_model.device_ids
        names GPUs for it."""
        self.tokenizer = tokenizer
        self.reward_fn_key = cfg.data.reward_fn_key
        self.on_error = cfg.reward_model.on_error
        spec = score_fn_spec(cfg)
        self.compute_score = spec.load()  # loaded here too with workers: a bad file fails at start-up
        self.reward_model = build_reward_model(cfg, tokenizer, device) if cfg.reward_model.enable else None
        self.scores_with_model = self.reward_model is not None  # it needs the device: scoring stays synchronous
        workers = cfg.reward_model.num_workers
        self.pool = ScoringPool(spec, workers, self.on_error) if workers > 1 else None

    def close(self) -> None:
        """Stop the scoring processes (reward_model.num_workers > 1); safe to call twice."""
        if self.pool is not None:
            self.pool.close()

    def describe(self) -> str:
        return self.reward_model.describe() if self.reward_model is not None else "rule/function rewards"

    def compute_scores(self, batch: Batch, validate: bool = False) -> tuple[Batch, dict[str, list], dict[str, float]]:
        """token_level_scores (B, R), per-row extra info from dict-valued rewards, and metrics.

        With a reward model, training scores are its `rm_scores` (verl's naive manager returns them
        as-is); validation always uses rule rewards (verl skips model-based validation).
        """
        if self.reward_model is not None and not validate:
            rm_scores = self.reward_model.compute_rm_score(batch)["rm_scores"]
            return Batch({"token_level_scores": rm_scores.float()}), {}, {"reward/num_errors": 0.0}
        texts = decode_responses(self.tokenizer, batch)
        reward_info = list(batch["reward_model"])
        rows = (texts, list(batch[self.reward_fn_key]), [r.get("ground_truth") for r in reward_info],
                list(batch.get("extra_info", [None] * len(batch))))
        scored = self.pool.score(*rows) if self.pool is not None else score_batch(
            *rows, self.compute_score, on_error=self.on_error)
        lengths = batch["response_mask"].sum(-1)
        scores = place_scores(scored.scores, lengths, batch["responses"].shape[1])
        metrics = {"reward/num_errors": float(scored.num_errors)}
        return Batch({"token_level_scores": scores.to(torch.float32)}), scored.extra, metrics
