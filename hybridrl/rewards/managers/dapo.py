"""verl's `dapo` reward manager: naive scoring plus DAPO's overlong reward shaping (Yu et al. 2025, §3.4).

A response longer than L_max - L_cache (L_max = `max_resp_len`, L_cache = the buffer `len`) loses
(length - (L_max - L_cache)) / L_cache x `penalty_factor`, i.e. up to `penalty_factor` at L_max; shorter
ones lose nothing. The same manager scores validation, as in verl.

Spellings (all verl's): `+reward_model.reward_kwargs.overlong_buffer_cfg.{enable,len,penalty_factor,log}`
with `+reward_model.reward_kwargs.max_resp_len` (verl's trainer; `reward.reward_kwargs.*` in verl's
August-2026 tree), or `reward_model.overlong_buffer.*` (verl's DAPO recipe, where max_resp_len is
data.max_response_length). Extra info per row: the reward's dict keys, or `acc` = the score for a
float reward; with `log`, `overlong_reward` and `overlong`. Metrics: reward/overlong_reward/mean and
reward/overlong/mean (the share of penalised responses) whenever the buffer is on.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.errors import ConfigError
from hybridrl.rewards.manager import ScoredBatch
from hybridrl.rewards.managers.base import ManagerContext, RewardRows, check_kwargs, register
from hybridrl.rewards.managers.naive import RowScorer
from hybridrl.utils.batch import Batch

_BUFFER_KEYS = ("enable", "len", "penalty_factor", "log")


@dataclass(frozen=True)
class OverlongBuffer:
    length: int  # L_cache, tokens
    penalty_factor: float
    max_resp_len: int  # L_max, tokens
    log: bool

    def penalty(self, response_length: int) -> float:
        """min(-(length - (L_max - L_cache)) / L_cache * factor, 0): 0 up to L_max - L_cache, -factor at L_max."""
        exceed = response_length - (self.max_resp_len - self.length)
        return min(-exceed / self.length * self.penalty_factor, 0)


def overlong_buffer(context: ManagerContext, cfg: dict | None, max_resp_len: int | None) -> OverlongBuffer | None:
    """The enabled buffer from either spelling, checked as verl checks it (with the key names in the errors)."""
    recipe = context.overlong_buffer
    if cfg is not None and recipe is not None:
        raise ConfigError("reward_model.overlong_buffer and reward_model.reward_kwargs.overlong_buffer_cfg are two "
                          "spellings of DAPO's overlong buffer; set only one")
    key = "reward_model.reward_kwargs.overlong_buffer_cfg"
    if recipe is not None:
        cfg, key, max_resp_len = recipe, "reward_model.overlong_buffer", context.max_response_length
    if not cfg or not cfg.get("enable"):
        return None
    unknown = sorted(set(cfg) - set(_BUFFER_KEYS))
    if unknown:
        raise ConfigError(f"{key} has unknown keys {unknown}; it takes {list(_BUFFER_KEYS)}")
    length = cfg.get("len", 0)
    if max_resp_len is None:
        raise ConfigError(f"{key}.enable=true needs the maximum response length: set "
                          "+reward_model.reward_kwargs.max_resp_len=<data.max_response_length>")
    if not length or length <= 0:
        raise ConfigError(f"{key}.len={length!r} must be positive when the overlong penalty is enabled; to switch "
                          f"the penalty off set {key}.enable=false")
    if max_resp_len < length:
        raise ConfigError(f"max_resp_len ({max_resp_len}) must be at least {key}.len ({length}); e.g. len="
                          f"{max_resp_len // 4} for a quarter of the responses' budget")
    return OverlongBuffer(int(length), float(cfg.get("penalty_factor", 0.0)), int(max_resp_len), bool(cfg.get("log")))


@register("dapo")
class DAPORewardManager(RowScorer):
    def __init__(self, context: ManagerContext, max_resp_len: int | None = None,
                 overlong_buffer_cfg: dict | None = None, **reward_kwargs) -> None:
        check_kwargs("dapo", reward_kwargs, ())
        super().__init__(context)
        self.buffer = overlong_buffer(context, overlong_buffer_cfg, max_resp_len)
        tokenizer = context.tokenizer
        self.eos = getattr(tokenizer, "eos_token", None) if tokenizer is not None else None

    def __call__(self, batch: Batch, rows: RewardRows) -> ScoredBatch:
        # verl strips an EOS that survived decoding (when it is not a special token)
        texts = [t[:-len(self.eos)] if self.eos and t.endswith(self.eos) else t for t in rows.responses_text]
        scored = self.score_rows(rows, texts)
        acc = scored.extra.get("acc", [None] * len(rows))
        scored.extra["acc"] = [score if value is None else value for score, value in zip(scored.scores, acc)]
        if self.buffer is not None:
            self._apply_penalty(scored, rows.response_lengths)
        return scored

    def _apply_penalty(self, scored: ScoredBatch, lengths: list[int]) -> None:
        penalties = [self.buffer.penalty(length) for length in lengths]
        scored.scores = [score + penalty for score, penalty in zip(scored.scores, penalties)]
        if self.buffer.log:
            scored.extra["overlong_reward"] = penalties
            scored.extra["overlong"] = [penalty < 0 for penalty in penalties]
        if penalties:
            scored.metrics["reward/overlong_reward/mean"] = sum(penalties) / len(penalties)
            scored.metrics["reward/overlong/mean"] = sum(p < 0 for p in penalties) / len(penalties)
