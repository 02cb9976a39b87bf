"""Role workers on a tiny model from a config, and verl-layout batches with ragged prompts and responses."""

from __future__ import annotations

import torch

from hybridrl.config import load_config
from hybridrl.config.batch_sizes import BatchSizes
from hybridrl.utils.batch import Batch


def worker_config(model_dir: str, extra: list[str] = ()):
    """One mini-batch of 8 rows (n=1), fixed micro-batches of 2 rows unless `extra` says otherwise."""
    return load_config([
        f"actor_rollout_ref.model.path={model_dir}", f"critic.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "critic.model.enable_gradient_checkpointing=false", "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "critic.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "critic.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.grad_clip=1e9", "critic.grad_clip=1e9",  # compare raw gradients
        "trainer.device=cpu",
    ] + list(extra))


def build_actor(model_dir: str, extra: list[str] = (), world_size: int = 1, device: str = "cpu"):
    from hybridrl.workers.actor import ActorWorker

    cfg = worker_config(model_dir, [*extra, f"trainer.device={device}"])
    return ActorWorker(cfg, BatchSizes.from_config(cfg, world_size), torch.device(device), total_training_steps=1)


def build_critic(model_dir: str, extra: list[str] = (), world_size: int = 1, device: str = "cpu"):
    from hybridrl.workers.critic import CriticWorker

    cfg = worker_config(model_dir, [*extra, f"trainer.device={device}"])
    torch.manual_seed(0)  # the fresh value head
    return CriticWorker(cfg, BatchSizes.from_config(cfg, world_size), torch.device(device), total_training_steps=1)


def ragged_batch(num_rows: int = 8, prompt_width: int = 12, response_width: int = 10, seed: int = 0,
                 token_range: tuple[int, int] = (5, 60)) -> Batch:
    """Prompts left-padded to `prompt_width`, responses right-padded to `response_width`, every row a
    different length and at least two all-padding columns on each side; plus the update's inputs."""
    gen = torch.Generator().manual_seed(seed)
    lo, hi = token_range
    prompt_lens = torch.randint(1, prompt_width - 1, (num_rows,), generator=gen)
    response_lens = torch.randint(1, response_width - 1, (num_rows,), generator=gen)
    ids = torch.randint(lo, hi, (num_rows, prompt_width + response_width), generator=gen)
    columns = torch.arange(prompt_width + response_width)
    prompt_mask = (columns < prompt_width) & (columns >= prompt_width - prompt_lens[:, None])
    response_mask = (columns >= prompt_width) & (columns < prompt_width + response_lens[:, None])
    attention_mask = (prompt_mask | response_mask).long()
    ids = ids * attention_mask  # pad id 0
    shape = (num_rows, response_width)
    return Batch({
        "input_ids": ids, "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "responses": ids[:, prompt_width:], "response_mask": attention_mask[:, prompt_width:],
        "old_log_probs": -torch.rand(shape, generator=gen) * 4, "advantages": torch.randn(shape, generator=gen),
        "values": torch.randn(shape, generator=gen), "returns": torch.randn(shape, generator=gen),
    }, meta={"temperature": 1.0})
