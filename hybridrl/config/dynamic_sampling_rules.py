"""`algorithm.filter_groups.*` rules: DAPO dynamic sampling (hybridrl.trainer.batch_sources.dynamic_sampling).

`data.gen_batch_size` against `data.train_batch_size` is a range rule (ranges.py `cross_range_problems`).
"""

from __future__ import annotations

from typing import Any

from hybridrl.config.genrm import is_genrm

SUMMED_METRICS = ("seq_reward", "seq_final_reward")  # computed from the scores; others come from the reward's extra info


def filter_groups_problems(cfg: Any) -> list[str]:
    """What a run with dynamic sampling cannot do; nothing when it is off."""
    groups = cfg.algorithm.filter_groups
    if not groups.enable:
        return []
    problems = []
    if not groups.metric:
        problems.append("algorithm.filter_groups.enable=true needs algorithm.filter_groups.metric, the per-response "
                        "value that must vary within a prompt's group: acc (the dapo reward manager gives it), score, "
                        "seq_reward (the summed score), or another key of the reward's per-row extra info")
    elif groups.metric == "seq_final_reward" and cfg.algorithm.use_kl_in_reward:
        problems.append("algorithm.filter_groups.metric=seq_final_reward with algorithm.use_kl_in_reward=true is not "
                        "implemented: the KL-penalised reward needs old and reference log-probs of every generated "
                        "response before filtering, which hybridrl computes for the kept rows only; filter on "
                        "seq_reward (the score before the penalty) or acc")
    elif (cfg.reward_model.enable and groups.metric not in SUMMED_METRICS
          and not is_genrm(cfg.reward_model, cfg.custom_reward_function.path)):  # a GenRM's function gives extra info
        problems.append(f"algorithm.filter_groups.metric={groups.metric!r} with reward_model.enable=true: a reward "
                        "model gives one score per response and no other per-row values; filter on seq_reward")
    if groups.max_inflight_gen_batches != 1:
        problems.append(f"algorithm.filter_groups.max_inflight_gen_batches={groups.max_inflight_gen_batches}: "
                        "streaming dynamic sampling (verl's v1 replay buffer, which keeps up to this many x "
                        "data.train_batch_size prompts in flight) is not implemented; hybridrl generates one batch "
                        "of data.gen_batch_size prompts at a time (verl's DAPO recipe): set it to 1 and raise "
                        "data.gen_batch_size to generate more per round")
    return problems
