"""The single controller: `fit()` loops over steps; `run_step()` is a short list of named, timed phases.

gen → (gen_max) → reward → old_log_prob → (ref) → (teacher) → (values) → adv → (update_critic) → update_actor →
update_weights, then testing / save_checkpoint. Which optional phases run is data (`RoleNeeds`), never
a test of the algorithm's name.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

from hybridrl.algorithms import agg_loss, apply_kl_penalty, compute_advantage, get_kl_controller
from hybridrl.algorithms.agreement import rollout_agreement_metrics
from hybridrl.algorithms.balance import balanced_order
from hybridrl.config import ConfigError, HybridRLConfig, config_to_dict
from hybridrl.config.run_plan import RunPlan
from hybridrl.errors.oom import oom_guard
from hybridrl.logging.log import get_logger
from hybridrl.trainer import checkpointing
from hybridrl.trainer.guards import nonfinite, run_signals
from hybridrl.trainer.correction import bypass_old_log_probs, checked_settings, decoupled_correction, needs_whole_batch
from hybridrl.trainer.batch_sources.dynamic_sampling import DynamicSampler, RoundHooks, pop_reward_extra
from hybridrl.trainer.metrics import OLD_LOG_PROBS_FROM_UPDATE, compute_step_metrics, record_skipped_phase
from hybridrl.trainer.preflight import preflight
from hybridrl.trainer.setup import build_dataset, build_loader, build_tokenizer, seed_everything, total_training_steps
from hybridrl.trainer.step_dump import dump_step_rollouts
from hybridrl.trainer.validation import validation_metrics
from hybridrl.utils.batch import Batch
from hybridrl.utils.gc_time import gc_clock, startup_objects_frozen
from hybridrl.utils.memory import PhaseMemory, host_memory_metrics, max_merge
from hybridrl.utils.metrics import timed
from hybridrl.utils.profiling import ProfileSpec, StepProfiler, profiled_step
from hybridrl.utils.threads import start_responsive
from hybridrl.workers.launch import Roles, build_roles
from hybridrl.workers.rollout import sampling_params

log = get_logger("hybridrl.trainer")


class PPOTrainer(checkpointing.CheckpointExtras):
    def __init__(self, cfg: HybridRLConfig, plan: RunPlan | None = None):
        """`plan`: what `preflight(cfg)` returns (made here when not given). With worker ranks (several devices,
        or Ray asked for) `fit()` stops them when it returns. Signals and trainer.pid first:
        trainer/guards/run_signals.py."""
        if type(self) is PPOTrainer and cfg.trainer.v1.trainer_mode != "sync":
            raise ConfigError(f"trainer.v1.trainer_mode={cfg.trainer.v1.trainer_mode} runs the asynchronous trainer: "
                              "build it with hybridrl.trainer.main_ppo.make_trainer(cfg) (hybridrl train does)")
        self.signals = run_signals.RunSignals.around(checkpointing.root_dir(cfg), lambda: self._build(cfg, plan))

    def _build(self, cfg: HybridRLConfig, plan: RunPlan | None) -> None:
        self.plan = plan if plan is not None else preflight(cfg)
        self.device = torch.device(self.plan.device)
        # With worker ranks the controller computes nothing on the GPU (unless a reward model runs here):
        # the ranks measure their own phases, and querying CUDA here would put a context on GPU 0.
        on_controller = not self.plan.on_ranks or cfg.reward_model.enable
        self.memory = PhaseMemory(self.device if on_controller else "cpu")
        self.cfg = cfg
        seed_everything(cfg.trainer.seed)
        self.tokenizer = build_tokenizer(cfg)
        self.train_loader = build_loader(cfg, build_dataset(cfg, self.tokenizer, "train"), self.tokenizer, "train")
        self.val_loader = (build_loader(cfg, build_dataset(cfg, self.tokenizer, "val"), self.tokenizer, "val")
                           if cfg.data.val_files else None)
        self.total_steps = total_training_steps(cfg, len(self.train_loader))
        self.roles: Roles = build_roles(cfg, self.plan, self.tokenizer, self.total_steps)
        self.dynamic_sampling = DynamicSampler.from_config(  # algorithm.filter_groups (DAPO)
            cfg, self.train_loader, RoundHooks(self._generation, self.roles.reward.compute_scores, self._phase))
        kl = cfg.algorithm.kl_ctrl
        self.kl_ctrl = get_kl_controller(kl.type, kl.kl_coef, kl.target_kl, kl.horizon)
        self.nonfinite = nonfinite.NonFiniteGuard(cfg)  # steps whose optimizer steps were skipped for non-finite values
        self.correction = checked_settings(cfg)  # algorithm.rollout_correction (trainer/correction.py)
        self.global_step = 0
        self.resumed_from: str | None = None  # the checkpoint resumed from (checkpointing.maybe_resume)
        self.profile_spec = ProfileSpec.from_config(cfg.global_profiler)
        self.profiler = StepProfiler("controller", self.memory.device,
                                     cuda_elsewhere=self.memory.device != self.device)  # the ranks hold the GPUs
        self._last_reward_extra: dict[str, list] = {}
        self._explained_skips: set[str] = set()  # phases whose timing_s/<phase> = 0 was explained (metrics.py)
        if cfg.reward_model.launch_reward_fn_async and self.roles.reward.scores_with_model:
            log.warning("reward_model.launch_reward_fn_async applies to reward functions; with a reward model "
                        "(reward_model.enable=true) scoring stays synchronous")

    # ================================================================= loop
    def fit(self) -> dict[str, float]:
        from hybridrl.elastic.rollout import make_elasticity

        self.elasticity = make_elasticity(self.cfg, self.plan, self.roles.rollout, self.total_steps)  # between steps
        try:
            with startup_objects_frozen(), self._cpu_threads():  # gc_time.py; cpu_threads.py
                return self._fit()
        finally:
            self.signals.close()  # the previous SIGTERM/SIGINT handlers back, SIGUSR1/2 ignored, the pid file removed
            self.elasticity.close()  # borrowed replicas stopped
            self.roles.shutdown()  # the worker ranks (a failed group is already stopped); scoring processes

    def _cpu_threads(self):
        """With worker ranks on this node, the controller takes its share of the cores (cpu_threads.py)."""
        if not self.plan.on_ranks or self.cfg.trainer.nnodes > 1:
            return nullcontext()
        from hybridrl.distributed.cpu_threads import controller_cpu_threads

        return controller_cpu_threads(self.plan.world_size + 1)

    def _fit(self) -> dict[str, float]:
        from hybridrl.logging.tracker import build_trackers

        checkpointing.maybe_resume(self)
        self.trackers = trackers = build_trackers(
            self.cfg.trainer.logger, project_name=self.cfg.trainer.project_name,
            experiment_name=self.cfg.trainer.experiment_name, local_dir=checkpointing.root_dir(self.cfg),
            config_dict=config_to_dict(self.cfg))
        trackers.add("run_console", self._run_console())  # console: the banner now, progress per step, summary at end
        metrics: dict[str, float] = {}
        if self.val_loader is not None and self.cfg.trainer.val_before_train:  # after a resume too, as verl
            trackers.log(metrics := self.validate(), step=self.global_step)
            if self.cfg.trainer.val_only:  # verl: val_only ends the run inside the validation before training
                trackers.finish()
                return metrics
        while self._more_steps():
            for request in self.signals.at_step_boundary(self):  # stop (SIGTERM/SIGINT), or grow/shrink the rollout
                self.elasticity.apply(request)
            prompts, epoch = self.train_loader.next_batch()
            self.global_step += 1
            with profiled_step(self.profile_spec, self.global_step, self.profiler, self._call_ranks):
                metrics = self.run_step(prompts)
            metrics.update({"training/global_step": self.global_step, "training/epoch": epoch,
                            "perf/rollout_num_devices": len(self.roles.rollout.devices)})
            self._after_step(metrics)
            trackers.log(metrics, step=self.global_step)
            self.nonfinite.check(metrics, self.global_step)  # trainer.max_consecutive_nonfinite_steps
        trackers.finish()
        return metrics

    # ---- console (logging/run_console.py, logging/banner.py): what the banner and the summary report ----
    def _run_console(self):
        from hybridrl import __version__
        from hybridrl.logging.banner import run_facts
        from hybridrl.logging.run_console import RunConsole

        train_set, val_set = self.train_loader.dataset, self.val_loader.dataset if self.val_loader else None
        return RunConsole(run_facts(
            self.cfg, needs_critic=self.plan.needs.critic, needs_reference=self.plan.needs.reference,
            device_type=self.device.type, num_devices=self.plan.world_size,
            rollout_backend=self.plan.rollout_backend, train_rows=len(train_set),
            val_rows=len(val_set) if val_set is not None else None,
            prompt_lengths=getattr(train_set, "prompt_lengths", []), steps_per_epoch=len(self.train_loader),
            total_steps=self.total_steps, start_step=self.global_step, output_dir=checkpointing.root_dir(self.cfg),
            version=__version__))
    # ---- end console ----

    def _after_step(self, metrics: dict[str, float]) -> None:
        """Validation and checkpointing at their frequencies (and always at the last step, as verl)."""
        trainer, step = self.cfg.trainer, self.global_step
        last = not self._more_steps()
        timings: dict[str, float] = {}
        if self.val_loader is not None and trainer.test_freq > 0 and (last or step % trainer.test_freq == 0):
            with timed("testing", timings):
                metrics.update(self.validate())
        if trainer.save_freq > 0 and (last or step % trainer.save_freq == 0):
            with timed("save_checkpoint", timings):
                checkpointing.save(self)
        metrics.update({f"timing_s/{k}": v for k, v in timings.items()})

    def _more_steps(self) -> bool:
        """Up to total_steps; with dynamic sampling (steps of varying data) only while the data lasts too."""
        return self.global_step < self.total_steps and (self.dynamic_sampling is None or self.dynamic_sampling.has_data())

    # ================================================================= step
    @contextmanager
    def _phase(self, name: str, timings: dict[str, float]):
        """A named phase: timed, its peak memory recorded, and a CUDA OOM inside it made actionable."""
        with timed(name, timings), oom_guard(name, self.cfg, self.device), self.memory.phase(name), \
                self.profiler.phase(name):
            yield

    def _call_ranks(self, method: str, *args) -> list:
        """`method` on every worker rank."""
        return self.roles.groups.call_all(method, *args)

    def run_step(self, prompts: Batch) -> dict[str, float]:
        metrics: dict[str, float] = {}
        timings: dict[str, float] = {}
        prompts["uid"] = _uids(f"{self.global_step}", len(prompts))
        with timed("step", timings):  # the whole step (phases nest inside)
            if self.dynamic_sampling is None:
                batch = self._generation(prompts, metrics, timings)
            else:  # DAPO: rounds of gen + reward until enough groups vary (dynamic_sampling.py; the scores ride along)
                batch = self.dynamic_sampling.collect(prompts, self.global_step, metrics, timings)
            batch = self._balance(batch, metrics)
            scoring = self._score_in_background(batch)
            if scoring is None:
                with self._phase("reward", timings):
                    batch = self.score(batch, metrics)
            if self.correction.bypass_mode:  # rollout correction's bypass mode: π_old := π_rollout, no pass
                batch = bypass_old_log_probs(batch)
            elif not self.takes_old_log_probs_from_update(len(batch)):
                with self._phase("old_log_prob", timings):
                    batch = self.old_log_prob(batch, metrics)
            else:
                record_skipped_phase(timings, "old_log_prob", OLD_LOG_PROBS_FROM_UPDATE, self._explained_skips)
            if self.roles.reference is not None:
                with self._phase("ref", timings):
                    batch = batch.union(self.roles.reference.compute_ref_log_prob(batch))
            if self.roles.teacher is not None:  # on-policy distillation: the teachers score the responses
                with self._phase("teacher", timings):
                    batch = batch.union(self.roles.teacher.compute_teacher_log_probs(batch))
            if self.roles.critic is not None:
                with self._phase("values", timings):
                    batch = batch.union(self.roles.critic.compute_values(batch))
            if scoring is not None:
                with self._phase("reward", timings):  # only the wait the forward passes did not hide
                    batch = self._merge_scores(batch, scoring.result(), metrics)
            with self._phase("adv", timings):
                batch = self.advantages(batch, metrics)
            self.update(batch, metrics, timings)
        dump_step_rollouts(self.cfg.trainer.rollout_data_dir, self.tokenizer, self.global_step, batch,
                           self._last_reward_extra)
        metrics.update(compute_step_metrics(batch, timings, metrics, self.plan.needs.critic,
                                            self.cfg.actor_rollout_ref.rollout.response_length, self.plan.world_size))
        metrics.update(self._phase_metrics())
        self.train_loader.update_sampler(batch)  # data.sampler: a curriculum sampler's update(batch), as verl
        return metrics

    def _balance(self, batch: Batch, metrics: dict[str, float]) -> Batch:
        """trainer.balance_batch: reorder rows so each actor shard (a rank or a sequence-parallel group) has a
        similar token count (verl's `global_seqlen/*` metrics); with one shard nothing moves."""
        if not self.cfg.trainer.balance_batch:
            return batch
        order, balance = balanced_order(batch["attention_mask"], self.plan.actor_shards)
        metrics.update(balance)
        return batch.index(order) if order != sorted(order) else batch

    def _phase_metrics(self) -> dict[str, float]:
        """perf/max_memory_allocated_gb[/<phase>]: this process's, and with worker ranks (and borrowed rollout
        replicas) each rank's own, the max over all of them; with ranks also timing_s/<phase>_rank."""
        own = self.memory.pop_metrics() if self.device.type == "cuda" else host_memory_metrics()
        own["timing_s/gc"] = gc_clock().end_step()
        return max_merge(own, self.roles.phase_metrics())

    # =============================================================== phases
    def _generation(self, prompts: Batch, metrics: dict[str, float], timings: dict[str, float],
                    round_index: int = 0) -> Batch:
        """gen (+ gen_max for a greedy baseline); `round_index`: a dynamic-sampling round of this step."""
        with self._phase("gen", timings):
            batch = self.generate(prompts, metrics, round_index)
        if self.plan.needs.greedy_baseline:
            with self._phase("gen_max", timings):
                batch["reward_baselines"] = self.greedy_baseline(prompts)
        return batch

    def generate(self, prompts: Batch, metrics: dict[str, float], round_index: int = 0) -> Batch:
        params = sampling_params(self.cfg.actor_rollout_ref.rollout, validate=False, seed=self._rollout_seed(round_index))
        prompts.meta["global_steps"] = self.global_step  # verl's meta key: rollout traces are tagged with it
        batch, gen_metrics = self.roles.rollout.generate_sequences(prompts, params)
        metrics.update(gen_metrics)  # the engine's keys already carry their `rollout/` prefix
        return batch

    def greedy_baseline(self, prompts: Batch) -> torch.Tensor:
        """ReMax: the score of one greedy response per prompt, repeated for the prompt's n samples."""
        params = sampling_params(self.cfg.actor_rollout_ref.rollout, validate=False, greedy=True)
        greedy, _ = self.roles.rollout.generate_sequences(prompts, params)
        scores, _, _ = self.roles.reward.compute_scores(greedy)  # the same scorer as the samples
        return scores["token_level_scores"].sum(-1).repeat_interleave(self.cfg.actor_rollout_ref.rollout.n)

    def score(self, batch: Batch, metrics: dict[str, float]) -> Batch:
        if self.dynamic_sampling is not None:  # scored round by round while sampling: take its extra info
            self._last_reward_extra = pop_reward_extra(batch)
            return batch
        return self._merge_scores(batch, self.roles.reward.compute_scores(batch), metrics)

    def _merge_scores(self, batch: Batch, result, metrics: dict[str, float]) -> Batch:
        scores, extra, reward_metrics = result
        metrics.update(reward_metrics)
        self._last_reward_extra = extra
        return batch.union(scores)

    def _score_in_background(self, batch: Batch):
        """reward_model.launch_reward_fn_async (verl): the reward function scores on a thread while the
        old_log_prob / ref / values forwards run (the GIL handed back every 0.2 ms meanwhile: utils/threads.py);
        a Future of `compute_scores`, or None when scoring is synchronous (the key off, or a reward model,
        which needs the GPU itself). The thread is a daemon nobody joins: Ctrl-C or an error never waits on a
        stuck reward function (workers/reward.py `score_in_background`)."""
        if (not self.cfg.reward_model.launch_reward_fn_async or self.roles.reward.scores_with_model
                or self.dynamic_sampling is not None):  # dynamic sampling has scored before these passes
            return None
        return start_responsive(lambda: self.roles.reward.score_in_background(batch))

    def old_log_prob(self, batch: Batch, metrics: dict[str, float]) -> Batch:
        batch = batch.union(self.roles.actor.compute_log_prob(batch))
        entropys = batch.pop("entropys")
        mask = batch["response_mask"]
        loss_agg_mode = self.cfg.actor_rollout_ref.actor.loss_agg_mode
        metrics["actor/entropy"] = agg_loss(entropys, mask, loss_agg_mode).item()
        metrics.update(rollout_agreement_metrics(batch["rollout_log_probs"], batch["old_log_probs"], mask))
        return batch

    def takes_old_log_probs_from_update(self, num_rows: int) -> bool:
        """The on-policy shortcut (TRL's default, verl's `on_policy` branch of the update): with one epoch over
        one mini-batch and no KL in the reward, the update's first forward sees the very weights that would
        compute old log-probs, so it supplies them (detached) and the separate old_log_prob pass is skipped.
        The update then reports actor/entropy, training/rollout_probs_diff_* and rollout_corr/* from that forward
        (and computes IS weights there; rejection sampling keeps the pass: trainer/correction.py). Σπ² (the
        optimal token baseline's, which the advantages read before the update) comes from that pass only."""
        actor, algo = self.cfg.actor_rollout_ref.actor, self.cfg.algorithm
        return (actor.reuse_on_policy_log_prob and actor.ppo_epochs == 1 and not algo.use_kl_in_reward
                and not actor.calculate_sum_pi_squared
                and not needs_whole_batch(self.correction)
                and num_rows <= actor.ppo_mini_batch_size * self.cfg.actor_rollout_ref.rollout.n
                and self.cfg.trainer.critic_warmup <= self.global_step)

    def advantages(self, batch: Batch, metrics: dict[str, float]) -> Batch:
        algo = self.cfg.algorithm
        rewards = batch["token_level_scores"]
        if algo.use_kl_in_reward:
            rewards, current_kl, kl_metrics = apply_kl_penalty(
                rewards, batch["old_log_probs"], batch["ref_log_prob"], batch["response_mask"],
                self.kl_ctrl.value, algo.kl_penalty)
            self.kl_ctrl.update(current_kl, n_steps=len(batch))
            metrics.update(kl_metrics)
        batch["token_level_rewards"] = rewards
        batch = decoupled_correction(batch, self.correction, metrics)  # IS weights, rejection mask, rollout_corr/*
        advantages, returns = compute_advantage(
            algo.adv_estimator, token_level_rewards=rewards, response_mask=batch["response_mask"],
            index=batch["uid"], values=batch.get("values"), reward_baselines=batch.get("reward_baselines"),
            gamma=algo.gamma, lam=algo.lam, norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
            old_log_probs=batch.get("old_log_probs"), sum_pi_squared=batch.get("sum_pi_squared"),
            rollout_is_weights=batch.get("rollout_is_weights"), reward_extra_info=self._last_reward_extra,
            gdpo_reward_keys=algo.gdpo_reward_keys, gdpo_reward_weights=algo.gdpo_reward_weights)
        batch["advantages"], batch["returns"] = advantages, returns
        return batch

    def update(self, batch: Batch, metrics: dict[str, float], timings: dict[str, float]) -> None:
        if self.roles.critic is not None:
            with self._phase("update_critic", timings):
                metrics.update(self.roles.critic.update_critic(batch))
        if self.cfg.trainer.critic_warmup <= self.global_step:
            with self._phase("update_actor", timings):
                metrics.update(self.roles.actor.update_actor(batch))
            with self._phase("update_weights", timings):  # to rollout ranks elsewhere: perf/update_weights_gb
                metrics.update(self.sync_rollout_weights())

    def sync_rollout_weights(self) -> dict[str, float]:
        """The actor's new weights into the rollout (the asynchronous trainer also resumes generation here)."""
        return self.roles.rollout.sync_weights()

    # =========================================================== validation
    def validate(self) -> dict[str, float]:
        if self.val_loader is None:
            raise ValueError("validate() needs data.val_files; this run has none")
        rollout_cfg = self.cfg.actor_rollout_ref.rollout
        sources: list[str] = []
        uids: list[str] = []
        scores: list[float] = []
        extra: dict[str, list] = {}
        texts: dict[str, list] = {"inputs": [], "outputs": [], "gts": []}  # the validation hook (below)
        for chunk_index, prompts in enumerate(self.val_loader):
            prompts["uid"] = _uids(f"val{chunk_index}", len(prompts))
            params = sampling_params(rollout_cfg, validate=True, seed=self.cfg.trainer.seed)
            prompts.meta.update(global_steps=self.global_step, validate=True)  # verl's meta keys (trace tags)
            batch, _ = self.roles.rollout.generate_sequences(prompts, params)
            scored, chunk_extra, _ = self.roles.reward.compute_scores(batch, validate=True)
            sources += list(batch[self.cfg.data.reward_fn_key])
            uids += list(batch["uid"])
            scores += scored["token_level_scores"].sum(-1).tolist()
            for key, values in chunk_extra.items():
                extra.setdefault(key, []).extend(values)
            self._collect_val_texts(batch, texts)
        self._log_val_generations(texts, scores, extra)
        return validation_metrics(sources, uids, scores, extra)

    # ---- validation hook: trainer.log_val_generations, trainer.validation_data_dir (logging/val_generations.py) ----
    def _collect_val_texts(self, batch: Batch, texts: dict[str, list]) -> None:
        from hybridrl.logging.val_generations import wants_validation_texts

        if wants_validation_texts(self.cfg.trainer):
            from hybridrl.models.hf import batch_decode
            from hybridrl.workers.reward import decode_responses

            texts["inputs"] += batch_decode(self.tokenizer, batch["prompts"].tolist(), skip_special_tokens=True)
            texts["outputs"] += decode_responses(self.tokenizer, batch)
            texts["gts"] += [(info or {}).get("ground_truth") for info in batch["reward_model"]]

    def _log_val_generations(self, texts: dict[str, list], scores: list[float], extra: dict[str, list]) -> None:
        from hybridrl.logging.val_generations import record_validation_samples

        record_validation_samples(self.trackers, self.cfg.trainer, texts, scores, extra, self.global_step)
    # ---- end validation hook ----

    # ============================================================== helpers
    def _rollout_seed(self, round_index: int = 0, step: int | None = None) -> int:
        """Per step (`step`: another's); a later dynamic-sampling round adds round << 48 (engine: seed bits 32+)."""
        base, step = self.cfg.actor_rollout_ref.rollout.seed, self.global_step if step is None else step
        return (base if base is not None else self.cfg.trainer.seed) * 1_000_003 + step + (round_index << 48)



def _uids(prefix: str, count: int) -> list[str]:
    """Deterministic group ids (a prompt's n samples share one), so runs are reproducible."""
    return [f"{prefix}-{i}" for i in range(count)]
