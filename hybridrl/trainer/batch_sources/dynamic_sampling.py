"""DAPO dynamic sampling (`algorithm.filter_groups`): rounds of generation and reward until a step has
`data.train_batch_size` groups whose responses disagree; the rest of the step trains on exactly those.

verl's semantics (recipe/dapo/dapo_ray_trainer.py; verl's August-2026 tree streams the same filter through its
v1 replay buffer instead):
- a round takes the loader's next `data.gen_batch_size` prompts (null = train_batch_size), generates `rollout.n`
  responses each (with ReMax's greedy baseline when the estimator needs it) and scores them;
- it keeps the groups whose `metric` is not constant (algorithms/group_filter.py). `metric` is a key of the
  reward's per-row extra info (`acc`, `score`, ...: the dapo manager gives `acc` = the score when the reward
  is a float), `seq_reward` (the summed token-level score) or `seq_final_reward` (the summed reward after the
  KL-in-reward penalty, which without use_kl_in_reward is seq_reward; with it the config refuses the metric,
  see config/dynamic_sampling_rules.py);
- rounds repeat until train_batch_size groups are kept; the first train_batch_size of them, in generation
  order, are trained on, the surplus is dropped;
- `max_num_gen_batches` > 0 caps the rounds of one step: reaching it without enough groups raises
  `DynamicSamplingError`, as verl raises. Training on fewer groups would change the step's mini-batch
  arithmetic and learning rate per sample, and the usual cause (a reward that cannot tell the responses
  apart, or data far too easy or hard) is better fixed than trained through; the error says which values
  the dropped groups shared;
- every round's prompts are consumed: the loader's position, saved with each checkpoint, advances past them,
  so a resumed run continues exactly where the uninterrupted one would.

Metrics: `train/num_gen_batches` (verl's recipe), `training/filter_groups/evicted_samples` (groups dropped as
constant) and `training/filter_groups/discarded_surplus_samples` (kept groups beyond train_batch_size), with
verl's August-2026 names. The rounds' phases add up in `timing_s/gen`, `timing_s/reward`, ...; of the rounds'
other generation and reward metrics, `timing_s/*` and counts (`num_` in the name) add up, `*max` keys take
the max, `*min` the min, and the rest are the last round's (verl keeps only its last round's metrics).

Where hybridrl differs from verl: the run's end. A step takes a varying number of rounds, so without
`trainer.total_training_steps` the run ends when `trainer.total_epochs` passes over the data are used up;
a step that begins inside the last epoch finishes with prompts from the next epoch's order (verl drops that
step's generations) and is the run's last step, validated and saved as such. With total_training_steps
set, the data rolls over epochs until that step, as every hybridrl run does. The adaptive KL-in-reward
controller is updated once per step with the trained rows (verl updates it once per round, with every row).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from hybridrl.algorithms.group_filter import filter_constant_groups
from hybridrl.config import ConfigError, HybridRLConfig
from hybridrl.config.dynamic_sampling_rules import SUMMED_METRICS
from hybridrl.data.loader import StatefulLoader
from hybridrl.logging.log import get_logger
from hybridrl.utils.batch import Batch

log = get_logger("hybridrl.trainer")

REWARD_EXTRA_KEY = "reward_extra_info"  # the kept rows' extra info, one dict per row, until the reward phase


@dataclass(frozen=True)
class RoundHooks:
    """What a round uses of the trainer."""

    # gen (+ gen_max) of (prompts, metrics, timings, round index); a round > 0 draws its own sampling noise
    generate: Callable[[Batch, dict[str, float], dict[str, float], int], Batch]
    score: Callable[[Batch], tuple[Batch, dict[str, list], dict[str, float]]]  # RewardWorker.compute_scores
    phase: Callable[[str, dict[str, float]], AbstractContextManager]  # the trainer's timed phase


class DynamicSamplingError(RuntimeError):
    """max_num_gen_batches rounds did not find train_batch_size groups whose responses disagree."""


@dataclass(frozen=True)
class FilterSettings:
    metric: str
    groups_per_step: int  # data.train_batch_size
    prompts_per_round: int  # data.gen_batch_size or train_batch_size
    max_rounds: int  # algorithm.filter_groups.max_num_gen_batches; <= 0 = no limit

    @classmethod
    def from_config(cls, cfg: HybridRLConfig) -> "FilterSettings":
        data, groups = cfg.data, cfg.algorithm.filter_groups
        assert groups.metric, "config/dynamic_sampling_rules.py requires the metric"
        return cls(groups.metric, data.train_batch_size, data.gen_batch_size or data.train_batch_size,
                   groups.max_num_gen_batches)


@dataclass
class _Collected:
    """What the rounds of one step kept so far."""

    rows: list[Batch] = field(default_factory=list)
    extras: list[dict[str, list]] = field(default_factory=list)
    num_groups: int = 0
    constant_values: Counter = field(default_factory=Counter)  # of the dropped groups


class DynamicSampler:
    def __init__(self, settings: FilterSettings, loader: StatefulLoader, hooks: RoundHooks, *, total_epochs: int,
                 fixed_steps: bool) -> None:
        """`loader`: the training loader, read for each round after a step's first. `fixed_steps`: the run's length
        is trainer.total_training_steps (data rolls over epochs); otherwise total_epochs passes over the data."""
        self.settings = settings
        self.loader = loader
        self.hooks = hooks
        self.total_epochs = total_epochs
        self.fixed_steps = fixed_steps
        self._told_data_spent = False
        log.info(f"algorithm.filter_groups: each step generates rounds of {settings.prompts_per_round} prompts and "
                 f"keeps the groups whose {settings.metric} varies, until {settings.groups_per_step} are kept")

    @classmethod
    def from_config(cls, cfg: HybridRLConfig, loader: StatefulLoader, hooks: RoundHooks) -> "DynamicSampler | None":
        if not cfg.algorithm.filter_groups.enable:
            return None
        return cls(FilterSettings.from_config(cfg), loader, hooks, total_epochs=cfg.trainer.total_epochs,
                   fixed_steps=bool(cfg.trainer.total_training_steps))

    def has_data(self) -> bool:
        """Whether another step may start: always with a fixed step count, else while total_epochs last."""
        if self.fixed_steps or self.loader.epoch < self.total_epochs:
            return True
        if not self._told_data_spent:
            self._told_data_spent = True
            log.info(f"dynamic sampling used trainer.total_epochs={self.total_epochs} passes over the data: the run "
                     "ends here (set trainer.total_training_steps to train a fixed number of steps)")
        return False

    def collect(self, prompts: Batch, step: int, metrics: dict[str, float], timings: dict[str, float]) -> Batch:
        """Rounds from `prompts` (the step's first generation batch, with its uids) on, until enough groups vary;
        the trained rows (train_batch_size groups), scored, with the reward's extra info in `REWARD_EXTRA_KEY`."""
        collected = _Collected()
        round_metrics: list[dict[str, float]] = []  # one per round
        for round_index in itertools.count():
            if round_index:
                prompts = self.loader.next_batch()[0]
                prompts["uid"] = [f"{step}.{round_index}-{i}" for i in range(len(prompts))]
            round_metrics.append({})
            rows, extra = self._round(prompts, round_index, round_metrics[-1], timings)
            self._keep_varied_groups(rows, extra, collected)
            if collected.num_groups >= self.settings.groups_per_step:
                break
            self._check_round_limit(round_index + 1, collected)
        metrics.update(merge_round_metrics(round_metrics))
        metrics.update({"train/num_gen_batches": float(len(round_metrics)),
                        "training/filter_groups/evicted_samples": float(sum(collected.constant_values.values())),
                        "training/filter_groups/discarded_surplus_samples":
                            float(collected.num_groups - self.settings.groups_per_step)})
        return self._trained_rows(collected)

    def _round(self, prompts: Batch, round_index: int, metrics: dict[str, float],
               timings: dict[str, float]) -> tuple[Batch, dict[str, list]]:
        """Generate and score one generation batch: (its rows with token_level_scores, the reward's extra info)."""
        rows = self.hooks.generate(prompts, metrics, timings, round_index)
        with self.hooks.phase("reward", timings):
            scores, extra, reward_metrics = self.hooks.score(rows)
        metrics.update(reward_metrics)
        return rows.union(scores), extra

    def _keep_varied_groups(self, rows: Batch, extra: dict[str, list], collected: _Collected) -> None:
        result = filter_constant_groups(list(rows["uid"]), metric_values(rows, extra, self.settings.metric))
        collected.constant_values += result.constant_values
        if result.kept_rows:
            collected.rows.append(rows.index(result.kept_rows))
            collected.extras.append({key: [values[i] for i in result.kept_rows] for key, values in extra.items()})
            collected.num_groups += len(result.kept_groups)

    def _check_round_limit(self, rounds: int, collected: _Collected) -> None:
        settings = self.settings
        if settings.max_rounds <= 0 or rounds < settings.max_rounds:
            return
        shared = ", ".join(f"{count} at {value:g}" for value, count in collected.constant_values.most_common(5))
        raise DynamicSamplingError(
            f"DAPO dynamic sampling kept {collected.num_groups} of the {settings.groups_per_step} groups a step needs "
            f"after {rounds} generation batches of {settings.prompts_per_round} prompts "
            f"(algorithm.filter_groups.max_num_gen_batches={settings.max_rounds}); the dropped groups' "
            f"{settings.metric} was the same for every response ({shared or 'none dropped'}). The data is too easy "
            "or too hard for the model, or the reward cannot tell its responses apart. Raise "
            "algorithm.filter_groups.max_num_gen_batches (0 = no limit), data.gen_batch_size or "
            "actor_rollout_ref.rollout.n, or keep prompts of moderate difficulty")

    def _trained_rows(self, collected: _Collected) -> Batch:
        """The first groups_per_step kept groups (whole groups, in generation order), with their extra info."""
        rows, extra = concat_rows(collected.rows, collected.extras)
        uids = list(rows["uid"])
        trained = set(list(dict.fromkeys(uids))[:self.settings.groups_per_step])
        keep = [i for i, uid in enumerate(uids) if uid in trained]
        rows = rows.index(keep)
        rows[REWARD_EXTRA_KEY] = [{key: values[i] for key, values in extra.items()} for i in keep]
        return rows


def metric_values(rows: Batch, extra: dict[str, list], metric: str) -> list[float]:
    """The filter metric of each row: the summed token-level score, or the reward's extra info `metric`."""
    if metric in SUMMED_METRICS:
        return rows["token_level_scores"].sum(-1).tolist()
    if metric not in extra:
        raise ConfigError(
            f"algorithm.filter_groups.metric={metric!r} is not a value this run's reward gives: its per-row extra "
            f"info has {sorted(extra) or 'no keys'}; use one of those, or seq_reward (the summed score). "
            "reward_model.reward_manager=dapo adds acc (the score) for rewards that return a float")
    values = extra[metric]
    missing = [i for i, value in enumerate(values) if value is None]
    if missing:
        raise ConfigError(f"algorithm.filter_groups.metric={metric!r}: the reward gave no {metric} for "
                          f"{len(missing)} of {len(values)} responses (rows {missing[:5]}); return it for every "
                          "response, or filter on seq_reward")
    return [float(value) for value in values]


def concat_rows(rows: list[Batch], extras: list[dict[str, list]]) -> tuple[Batch, dict[str, list]]:
    """The rounds' kept rows as one batch and their extra info as one dict of lists (a key a round's reward
    did not give is None on that round's rows)."""
    batch = Batch.concat(rows)
    keys = list(dict.fromkeys(key for extra in extras for key in extra))
    merged = {key: [value for part, extra in zip(rows, extras) for value in extra.get(key, [None] * len(part))]
              for key in keys}
    return batch, merged


def pop_reward_extra(batch: Batch) -> dict[str, list]:
    """The extra info `collect` carried in the batch, as the reward worker returns it (a dict of per-row lists);
    removed from the batch, so the workers never see it."""
    per_row = list(batch.pop(REWARD_EXTRA_KEY))
    keys = list(dict.fromkeys(key for row in per_row for key in row))
    return {key: [row.get(key) for row in per_row] for key in keys}


def merge_round_metrics(rounds: list[dict[str, float]]) -> dict[str, float]:
    """The rounds' generation and reward metrics as one step's (rule in the module docstring)."""
    merged: dict[str, float] = {}
    for metrics in rounds:
        for key, value in metrics.items():
            merged[key] = _combine(key, merged[key], value) if key in merged else value
    return merged


def _combine(key: str, old: Any, new: Any) -> Any:
    if key.startswith("timing_s/") or "num_" in key:
        return old + new
    if key.endswith("max"):
        return max(old, new)
    if key.endswith("min"):
        return min(old, new)
    return new

