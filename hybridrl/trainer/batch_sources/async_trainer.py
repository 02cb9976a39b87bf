"""The trainer's second loop shape: asynchronous training (`trainer.v1.trainer_mode`, verl's V1 keys).

The step keeps the synchronous trainer's named phases; what changes is where the gen phase's batch comes from.
Each step's loader batch joins a queue of prompt groups (`trajectory_buffer.py`; num_warmup_batches more at the
first step), which the producer (`async_producer.py`) generates through the rollout's request API, and the gen
phase takes the oldest train batch of finished groups:
- colocate_async (the rollout shares the actor's devices): generation runs inside the gen phase, with the next
  batch's groups in flight beside this one's; once a batch is complete the rest are parked (aborted, tokens and
  log-probs kept), the engine sleeps, the step trains, the weights are synced, and the parked requests resume
  in the next gen phase (prefill rebuilds their KV). The long tail of this step's responses no longer holds up
  the step: it finishes during the next one.
- separate_async (the rollout on devices of its own): generation runs on a thread while the step trains; the
  update's weights are gathered meanwhile and loaded with generation paused (in-flight requests parked and
  resumed, never lost).
Staleness is bounded by admission (at most max_off_policy_threshold x train_batch_size groups started and not
yet trained) and `drop` / `wait`; with max_off_policy_threshold=1 both modes train exactly what the synchronous
trainer trains (same prompts, seeds and row keys).
Checkpoints hold the buffer: finished groups are restored, queued and running ones re-issued from their prompts.
"""

from __future__ import annotations

import time

from hybridrl.config import HybridRLConfig
from hybridrl.config.run_plan import RunPlan
from hybridrl.elastic.control import Request
from hybridrl.elastic.rollout import RolloutElasticity
from hybridrl.logging.log import get_logger
from hybridrl.trainer.batch_sources.async_batch import assemble_groups, eviction_metrics, off_policy_metrics
from hybridrl.trainer.batch_sources.async_producer import Producer
from hybridrl.trainer.ppo_trainer import PPOTrainer
from hybridrl.trainer.batch_sources.trajectory_buffer import TrajectoryBuffer
from hybridrl.utils.batch import Batch
from hybridrl.workers.protocols import RequestRolloutRole
from hybridrl.workers.rollout import sampling_params
from hybridrl.workers.rollout_group import SerializedGroup

log = get_logger("hybridrl.trainer")
HEAVY_EVICTION = 0.1  # evicted groups in one step, as a share of the train batch, that earn a notice


class AsyncPPOTrainer(PPOTrainer):
    def __init__(self, cfg: HybridRLConfig, plan: RunPlan | None = None) -> None:
        super().__init__(cfg, plan)
        v1 = cfg.trainer.v1
        self.separate = v1.trainer_mode == "separate_async"
        mode_cfg = v1.separate_async if self.separate else v1.colocate_async
        self.buffer = TrajectoryBuffer(cfg.data.train_batch_size, v1.sampler.max_off_policy_threshold,
                                       v1.sampler.max_off_policy_strategy)
        if self.separate:  # the generating thread and this one share the rollout's group
            _serialize_rollout_group(self)
        rollout_cfg = cfg.actor_rollout_ref.rollout
        self.producer = Producer(
            self._request_rollout(), self.buffer, sampling_params(rollout_cfg, validate=False), threaded=self.separate,
            steps_per_call=1 if self.plan.launcher == "in_process" else 4, park_sleeps=not self.separate)
        self.batches_queued = 0  # loader batches in the buffer so far: the next one's data index is this + 1
        self.warmup_left = mode_cfg.num_warmup_batches
        self.evictions_noticed = False
        self._step_started = time.perf_counter()

    def _request_rollout(self) -> RequestRolloutRole:
        rollout = self.roles.rollout
        if not isinstance(rollout, RequestRolloutRole):
            raise TypeError(f"trainer.v1.trainer_mode={self.cfg.trainer.v1.trainer_mode} needs a rollout with "
                            f"request-level calls; {type(rollout).__name__} has none")
        return rollout

    # ================================================================ the loop around the step
    def _fit(self) -> dict[str, float]:
        self.elasticity = _RefusedElasticity(self.elasticity, self.cfg.trainer.v1.trainer_mode)
        try:
            return super()._fit()
        finally:
            self.producer.close()

    def validate(self) -> dict[str, float]:
        with self.producer.paused():  # validation's batch call needs the engine with nothing in flight
            return super().validate()

    # ================================================================ the gen phase
    def generate(self, prompts: Batch, metrics: dict[str, float], round_index: int = 0) -> Batch:
        """This step's batch: `prompts` (the loop's loader batch) join the queue, and the oldest train batch of
        finished groups comes back, with the off-policy metrics of its trajectories."""
        self._queue(prompts)
        while self.warmup_left > 0:
            self._queue(self.train_loader.next_batch()[0])
            self.warmup_left -= 1
        groups = self.producer.collect(more_prompts=lambda: self._queue(self.train_loader.next_batch()[0]))
        if not self.separate:
            metrics.update(self.producer.park())
        version = self.producer.version  # the policy this step trains
        metrics.update(off_policy_metrics(groups, version))
        metrics.update(eviction_metrics(self.buffer.pop_evicted()))
        self._notice_heavy_eviction(metrics["training/off_policy/evicted_samples"])
        rollout_cfg = self.cfg.actor_rollout_ref.rollout
        return assemble_groups(groups, rollout_cfg.n, rollout_cfg.response_length, self.tokenizer.pad_token_id,
                               rollout_cfg.temperature)

    def _notice_heavy_eviction(self, evicted: float) -> None:
        """Once a run: `drop` evicted a tenth of a batch or more in one step. The evicted groups are the ones that
        ran longest, so the trained responses are biased short; `wait` trains them."""
        if self.evictions_noticed or evicted < HEAVY_EVICTION * self.buffer.batch_size:
            return
        self.evictions_noticed = True
        threshold = self.cfg.trainer.v1.sampler.max_off_policy_threshold
        log.warning(f"max_off_policy_strategy=drop evicted {evicted:.0f} prompt groups this step (train batch "
                    f"{self.buffer.batch_size}): they ran past max_off_policy_threshold={threshold} policy versions, "
                    f"so the longest responses go untrained and generating them was wasted. trainer.v1.sampler."
                    f"max_off_policy_strategy=wait trains them (the step waits for them); a larger "
                    f"max_off_policy_threshold lets them run longer. training/off_policy/evicted_samples counts them.")

    def _queue(self, prompts: Batch) -> None:
        """A loader batch joins the queue as batch `data_index`, seeded as the sync trainer's step of that index."""
        index = self.batches_queued + 1

        def add() -> None:
            self.buffer.add(prompts, index, self._rollout_seed(step=index))

        self.producer.queue(add)
        self.batches_queued = index

    # ================================================================ weights, step end
    def sync_rollout_weights(self) -> dict[str, float]:
        if not self.separate:
            return self.producer.sync(self.global_step, self.roles.rollout.sync_weights)
        rollout = self._request_rollout()
        payload = rollout.gather_weights()  # the actor's group gathers while the rollout still generates
        return self.producer.sync(self.global_step, lambda: rollout.load_weights(payload))

    def update(self, batch: Batch, metrics: dict[str, float], timings: dict[str, float]) -> None:
        super().update(batch, metrics, timings)
        self.producer.finish_step(self.global_step)  # no sync in critic warm-up: the batch still retires

    def _after_step(self, metrics: dict[str, float]) -> None:
        super()._after_step(metrics)
        now = time.perf_counter()
        if self.separate:  # verl's fully-async names: the trainer waiting for batches, the rollout waiting for room
            wall = max(now - self._step_started, 1e-9)
            metrics["fully_async/trainer/idle_ratio"] = metrics.get("timing_s/gen", 0.0) / wall
            metrics["fully_async/rollouter/idle_ratio"] = max(0.0, 1.0 - self.producer.rollout_busy_s / wall)
        self.producer.rollout_busy_s, self._step_started = 0.0, now

    # ================================================================ checkpoints
    def checkpoint_extras(self) -> dict:
        with self.producer.cond:
            return {"async_trainer": {"buffer": self.buffer.state_dict(), "batches_queued": self.batches_queued,
                                      "warmup_left": self.warmup_left}}

    def load_checkpoint_extras(self, state: dict) -> None:
        """Finished groups come back as they were; queued and running ones are re-issued from their prompts (the
        loader's position, saved with them, is past all of them: nothing is lost or drawn twice)."""
        saved = state.get("async_trainer")
        if saved is None:
            log.warning("the checkpoint holds no asynchronous trainer state (saved by a sync run): the prompt queue "
                        "starts empty")
            return
        self.buffer.load_state_dict(saved["buffer"])
        self.batches_queued, self.warmup_left = saved["batches_queued"], saved["warmup_left"]
        self.producer.version = self.global_step  # the checkpoint's weights, synced to the rollout after this
        self._request_rollout().forget_groups()


def _serialize_rollout_group(trainer: AsyncPPOTrainer) -> None:
    """Every holder of the rollout's group gets the one serialized wrapper (async_producer's thread calls it)."""
    rollout = trainer.roles.rollout
    group = getattr(rollout, "group", None)
    if group is None:
        return
    wrapped = SerializedGroup(group)
    rollout.group = wrapped  # type: ignore[attr-defined]
    groups = trainer.roles.groups
    for table in (groups.by_name, groups.by_role):
        for key, value in table.items():
            if value is group:
                table[key] = wrapped


class _RefusedElasticity(RolloutElasticity):
    """Grow / shrink requests are not applied in the asynchronous modes: the request-level generation runs on the
    rollout's own replicas, so a borrowed one would stay idle. Each request is refused with a logged reason."""

    def __init__(self, elasticity: RolloutElasticity, mode: str) -> None:
        super().__init__(elasticity.rollout, elasticity.placement, elasticity._start_replica)
        self.mode = mode

    def apply(self, request: Request) -> None:
        log.warning(f"rollout {request.action} request ({request.source}) refused: trainer.v1.trainer_mode="
                    f"{self.mode} generates on the rollout's own replicas only; training goes on")
