"""verl's module names for interaction files written against verl, while such a file is imported (only when
verl itself is not installed; a real verl is left alone): `verl.interactions.base` is hybridrl's
BaseInteraction and `verl.utils.rollout_trace` hybridrl's tracing (`rollout_trace_op`)."""

from __future__ import annotations

import contextlib
from typing import Iterator

from hybridrl.utils.module_aliases import verl_module_aliases

VERL_INTERACTION_MODULES: dict[str, str] = {
    "verl.interactions.base": "hybridrl.rollout.interactions.base",
    "verl.interactions.gsm8k_interaction": "hybridrl.rollout.interactions.gsm8k",
    "verl.utils.rollout_trace": "hybridrl.rollout.trace",
}


@contextlib.contextmanager
def verl_interaction_modules() -> Iterator[None]:
    with verl_module_aliases(VERL_INTERACTION_MODULES):
        yield
