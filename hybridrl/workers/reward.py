"""The reward role: decode responses and score them with rule rewards or a custom function.

Scores are placed on the last valid response token (`token_level_scores`), as verl's naive manager.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, InvalidStateError
from contextlib import nullcontext

import torch

from hybridrl.config.genrm import is_genrm
from hybridrl.config.role_devices import is_remote
from hybridrl.config.schema import HybridRLConfig
from hybridrl.logging.log import get_logger
from hybridrl.models.hf import batch_decode
from hybridrl.rewards.manager import RewardFunctionError, ground_truths, place_scores
from hybridrl.rewards.managers import RewardRows, build_reward_manager
from hybridrl.rewards.watchdog import STUCK_FIX, STUCK_WHY, TIMEOUT_KEY, RowInFlight, stuck_calls_reported_to
from hybridrl.utils.batch import Batch
from hybridrl.workers.rollout import unpadded_rows

log = get_logger("rewards")


def response_valid_mask(batch: Batch) -> torch.Tensor:
    """(B, R) 1 on every response token that exists: the response columns of attention_mask (verl's rule), so a
    multi-turn trajectory's tool/observation tokens (response_mask 0) count too; response_mask without it."""
    width = batch["responses"].shape[1]
    attention = batch.get("attention_mask")
    return attention[:, -width:] if attention is not None and attention.shape[1] >= width else batch["response_mask"]


def last_trained_lengths(batch: Batch, valid_lengths: torch.Tensor) -> torch.Tensor:
    """(B,) where each row's score goes, as a length (index + 1): its last valid token (verl), unless an agent
    loop ended the row on inserted tokens (response_mask 0): then its last sampled token, since GAE, REINFORCE++
    and ReMax returns skip mask-0 tokens and a score placed there would never reach the loss. Equal to
    `valid_lengths` for every row that ends on a sampled token (all single-turn rows)."""
    mask = batch["response_mask"]
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    last_sampled = (mask.bool() * positions).amax(dim=1)
    return torch.where(last_sampled > 0, last_sampled, valid_lengths.to(last_sampled.device))


def decode_responses(tokenizer, batch: Batch) -> list[str]:
    """Each whole response (every valid token, tool turns included) as text; only real tokens become Python ints."""
    return batch_decode(tokenizer, unpadded_rows(batch["responses"], response_valid_mask(batch)),
                        skip_special_tokens=True)


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
                             max_length=rm.max_length, trust_remote_code=trust, use_shm=rm.model.use_shm,
                             client_kwargs=remote_client_kwargs(rm.remote, "reward_model.remote") if remote else None)


def remote_client_kwargs(remote, key: str) -> dict:
    """PoolingClient arguments from a `*.remote` config section (`key` names it in the client's messages)."""
    return {"timeout_s": remote.timeout_s, "max_retries": remote.max_retries, "backoff_s": remote.backoff_s,
            "config_key": key}


def start_genrm(cfg: HybridRLConfig, device: torch.device):
    """The served generative reward model (a GenRMService) when the config asks for one (config/genrm.py), else
    None."""
    if not is_genrm(cfg.reward_model, cfg.custom_reward_function.path):
        return None
    from hybridrl.workers.genrm import GenRMService

    return GenRMService(cfg, device)


def reward_extra_infos(batch: Batch) -> list[dict | None]:
    """Each row's extra_info (a copy) with verl's additions: `num_turns` (an agent loop's `__num_turns__`, else
    None) and `rollout_reward_scores` (scores an agent loop set, `reward_scores`, else {})."""
    rows = len(batch)
    infos = batch.get("extra_info", [None] * rows)
    turns, rollout_scores = batch.get("__num_turns__", [None] * rows), batch.get("reward_scores", [{}] * rows)
    return [{**(info or {}), "num_turns": turn, "rollout_reward_scores": scores}
            for info, turn, scores in zip(infos, turns, rollout_scores)]


class RewardWorker:
    def __init__(self, cfg: HybridRLConfig, tokenizer, device: torch.device = torch.device("cpu")):
        """`device`: the controller's, where an in-process reward model runs unless reward_model.device_ids
        names GPUs for it."""
        self.tokenizer = tokenizer
        self.reward_fn_key = cfg.data.reward_fn_key
        # verl's generative reward model: served on loopback for the custom function to query (workers/genrm.py)
        self.genrm = start_genrm(cfg, device)
        try:
            # reward_manager.name / source: the function is loaded here, so a bad file fails at start-up
            self.manager = build_reward_manager(cfg, tokenizer, self.genrm.offered_kwargs if self.genrm else None)
        except BaseException:
            if self.genrm is not None:
                self.genrm.close()
            raise
        in_process = cfg.reward_model.enable and self.genrm is None
        self.reward_model = build_reward_model(cfg, tokenizer, device) if in_process else None
        self.scores_with_model = self.reward_model is not None  # it needs the device: scoring stays synchronous
        self.timeout_s = cfg.reward_model.reward_fn_timeout_s
        # the built-in scorers compare with reward_model.ground_truth; a custom function or manager may not need it
        self.needs_ground_truth = not cfg.custom_reward_function.path and cfg.reward_manager.source != "importlib"
        self._missing_truth_warned = False

    @property
    def pool(self):
        """The row-scoring process pool of the naive/dapo manager (reward_model.num_workers > 1), else None."""
        return getattr(self.manager, "pool", None)

    def close(self) -> None:
        """Stop the manager's scoring processes (num_workers > 1, prime) and a served GenRM; safe to call twice."""
        try:
            self.manager.close()
        finally:
            if self.genrm is not None:
                self.genrm.close()

    def describe(self) -> str:
        if self.genrm is not None:
            return f"custom reward function with a {self.genrm.describe()}"
        return self.reward_model.describe() if self.reward_model is not None else "rule/function rewards"

    def compute_scores(self, batch: Batch, validate: bool = False) -> tuple[Batch, dict[str, list], dict[str, float]]:
        """token_level_scores (B, R), per-row extra info from dict-valued rewards, and metrics.

        With a reward model, training scores are its `rm_scores` (verl's naive manager returns them
        as-is); validation always uses rule rewards (verl skips model-based validation).
        """
        if "rm_scores" in batch:  # agent loops that scored their trajectories themselves (verl's rule)
            return Batch({"token_level_scores": batch["rm_scores"].float()}), {}, {"reward/num_errors": 0.0}
        if self.reward_model is not None and not validate:
            rm_scores = self.reward_model.compute_rm_score(batch)["rm_scores"]
            return Batch({"token_level_scores": rm_scores.float()}), {}, {"reward/num_errors": 0.0}
        lengths = response_valid_mask(batch).sum(-1)  # the score goes on the last token, as verl places it
        sources = list(batch[self.reward_fn_key])
        truths, missing = ground_truths(list(batch["reward_model"]), sources, self.needs_ground_truth)
        self._warn_missing_truths(len(missing), len(truths))
        rows = RewardRows(decode_responses(self.tokenizer, batch), sources, truths, reward_extra_infos(batch),
                          lengths.tolist())
        with self.genrm.scoring() if self.genrm is not None else nullcontext():
            scored = self.manager(batch, rows)
        scores = scored.token_level_scores if scored.token_level_scores is not None else place_scores(
            scored.scores, last_trained_lengths(batch, lengths), batch["responses"].shape[1])
        metrics = {"reward/num_errors": float(scored.num_errors), "reward/num_timeouts": float(scored.num_timeouts),
                   "reward/num_missing_ground_truth": float(len(missing)), **scored.metrics,
                   **(self.genrm.take_metrics() if self.genrm is not None else {})}
        return Batch({"token_level_scores": scores.to(torch.float32)}), scored.extra, metrics

    def score_in_background(self, batch: Batch) -> Future:
        """`compute_scores(batch)` on a daemon thread (reward_model.launch_reward_fn_async). The thread is never
        joined, so Ctrl-C and errors do not wait for it; a call on it that runs past reward_model.reward_fn_timeout_s
        and cannot be interrupted fails the Future and the thread is abandoned (rewards/watchdog.py)."""
        future: Future = Future()
        future.set_running_or_notify_cancel()

        def stuck(row: RowInFlight) -> None:
            _settle(future, error=RewardFunctionError(
                f"the reward function on sample {row.row} (data_source={row.data_source!r}) ran past {TIMEOUT_KEY}="
                f"{self.timeout_s:g} s and could not be interrupted on the scoring thread of "
                f"reward_model.launch_reward_fn_async ({STUCK_WHY}); scoring was abandoned, whatever "
                f"reward_model.on_error says. {STUCK_FIX}, or set reward_model.launch_reward_fn_async=false (the "
                "main thread can interrupt a blocking call)"))

        def run() -> None:
            try:
                with stuck_calls_reported_to(stuck):
                    result = self.compute_scores(batch)
            except BaseException as error:  # noqa: BLE001 - handed to the waiter
                _settle(future, error=error)
            else:
                _settle(future, result=result)

        threading.Thread(target=run, name="hybridrl-reward", daemon=True).start()
        return future

    def _warn_missing_truths(self, num_missing: int, num_rows: int) -> None:
        """A custom function may work without reward_model.ground_truth: say so once, count it every batch."""
        if num_missing and not self._missing_truth_warned:
            self._missing_truth_warned = True
            log.warning("%d of %d rows have no reward_model.ground_truth; the custom reward function gets "
                        "ground_truth=None for them (counted in reward/num_missing_ground_truth every step; this "
                        "line is not repeated)", num_missing, num_rows)


def _settle(future: Future, result=None, error: BaseException | None = None) -> None:
    """Complete `future` unless it is done already (an abandoned thread may finish after its waiter gave up)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass
