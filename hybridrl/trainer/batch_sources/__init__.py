"""Where a step's batch comes from when it is not one synchronous `generate` of the loader's prompts; the step's
other phases stay the synchronous trainer's (trainer/ppo_trainer.py).

- DAPO dynamic sampling (`algorithm.filter_groups`, dynamic_sampling.py): rounds of generation and reward until
  `data.train_batch_size` groups vary.
- Asynchronous training (`trainer.v1.trainer_mode=colocate_async | separate_async`, async_trainer.py: the
  `AsyncPPOTrainer` subclass): prompt groups queued in the trajectory buffer (trajectory_buffer.py: admission
  control, staleness), generated ahead through the rollout's request API (async_producer.py), and the oldest
  finished ones assembled into the step's batch with their off-policy metrics (async_batch.py).

verl's own tree keeps the two together as well: its v1 replay buffer runs DAPO's group filter.
"""
