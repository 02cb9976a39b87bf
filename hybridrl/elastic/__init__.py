"""Elastic rollout: the rollout borrows devices at runtime and gives them back, between training steps.

`control`: how requests arrive (SIGUSR1/SIGUSR2, request files, `hybridrl control`); `rollout`: which devices
a request may add and how they join the rollout (one-rank replica groups inside `workers.rollout_group`).
"""
