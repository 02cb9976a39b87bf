"""trainer.rollout_data_dir: each step's prompts, responses and scores as JSONL (verl's rollout dump)."""

from __future__ import annotations

from typing import Any

from hybridrl.utils.batch import Batch


def dump_step_rollouts(out_dir: str | None, tokenizer: Any, step: int, batch: Batch,
                       reward_extra: dict[str, list]) -> None:
    """Decode and write this step's rows into `out_dir` (nothing when it is unset): with the reward function's extra
    columns, and for agent-loop rows their `turns` (the spans trained on marked) and `num_turns`."""
    if not out_dir:
        return
    from hybridrl.logging.rollout_dump import dump_rollout_jsonl
    from hybridrl.models.hf import batch_decode
    from hybridrl.rollout.agent.metrics import rollout_turn_fields
    from hybridrl.workers.reward import decode_responses

    prompts = batch_decode(tokenizer, batch["prompts"].tolist(), skip_special_tokens=True)
    dump_rollout_jsonl(out_dir, step, prompts, decode_responses(tokenizer, batch),
                       batch["token_level_scores"].sum(-1).tolist(),
                       {**(reward_extra or {}), **rollout_turn_fields(tokenizer, batch)} or None)
