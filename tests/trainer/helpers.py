"""Overrides for tiny CPU trainer runs, and a look into a one-process run, shared by trainer tests."""

from __future__ import annotations

from hybridrl.workers.colocated import ColocatedWorker


def local_worker(trainer) -> ColocatedWorker:
    """The worker of a one-process run: its roles (actor.model, rollout.backend, ...) live in this process."""
    worker = trainer.roles.groups.local_worker
    assert worker is not None, "this trainer's roles run in other processes"
    return worker


def tiny_run_overrides(model_dir: str, files: tuple[str, str], out_dir: str, *, algo: str = "grpo",
                       steps: int = 2, extra: list[str] | None = None) -> list[str]:
    """A 2-step CPU run on the arithmetic task: 8 prompts × n=4, 4 response tokens."""
    train, test = files
    return [
        f"algorithm.adv_estimator={algo}", f"data.train_files={train}", f"data.val_files={test}",
        "data.train_batch_size=8", "data.max_prompt_length=8", "data.max_response_length=4",
        f"actor_rollout_ref.model.path={model_dir}", f"critic.model.path={model_dir}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
        "trainer.device=cpu", "trainer.logger=[file]", f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.val_before_train=false",
        f"trainer.default_local_dir={out_dir}", "trainer.seed=7",
        "critic.optim.lr=1e-3", "critic.ppo_micro_batch_size_per_gpu=8",
        "critic.model.enable_gradient_checkpointing=false",
    ] + list(extra or [])


def gpu_run_overrides(model_dir: str, files: tuple[str, str], out_dir: str, extra: list[str]) -> list[str]:
    """`tiny_run_overrides` without its CPU device and hf rollout, for runs whose `extra` places them on CUDA."""
    return [o for o in tiny_run_overrides(model_dir, files, out_dir, extra=extra)
            if not o.startswith(("trainer.device=cpu", "actor_rollout_ref.rollout.name=hf"))]
