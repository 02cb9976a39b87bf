"""Which launcher a run uses (local processes or Ray), from its config: torch- and Ray-free, read by preflight."""

from __future__ import annotations

import os

from hybridrl.logging.log import get_logger

logger = get_logger("distributed.ray")
LAUNCHERS = ("auto", "local", "ray")


def choose_launcher(trainer_launcher: str, nnodes: int, ray_address: str | None) -> str:
    """"local" or "ray": trainer.launcher=local|ray wins; auto → ray for several nodes or a Ray address. Pure:
    `configured_launcher` warns about Ray settings a local run leaves unused."""
    if trainer_launcher not in LAUNCHERS:
        raise ValueError(f"trainer.launcher={trainer_launcher!r} is not one of {LAUNCHERS}")
    if trainer_launcher == "local":
        if nnodes > 1:
            raise ValueError(f"trainer.launcher=local runs on one node but trainer.nnodes={nnodes}; use "
                             f"trainer.launcher=ray (or auto) for several nodes")
        return "local"
    if trainer_launcher == "ray" or nnodes > 1 or ray_address:
        return "ray"
    return "local"


def configured_launcher(cfg) -> str:
    """`choose_launcher` for a run's config: Ray for trainer.launcher=ray, trainer.nnodes > 1 or a Ray address
    (ray_kwargs.ray_init.address, else RAY_ADDRESS, which `ray job submit` sets), whatever the number of ranks.
    A run asks once (preflight: the plan keeps it); each warning about unused Ray settings is given once."""
    address, address_source = _ray_address_and_source(cfg)
    launcher = choose_launcher(cfg.trainer.launcher, cfg.trainer.nnodes, address)
    if launcher == "local":
        if address_source:  # only trainer.launcher=local keeps a run with an address off Ray
            _warn_once(f"trainer.launcher=local: {address_source} is not used (the run stays on this node); "
                       f"set trainer.launcher=ray (or auto) to join that Ray cluster")
        _warn_if_ray_init_is_set(cfg)
    return launcher


def _ray_address_and_source(cfg) -> tuple[str | None, str]:
    """The Ray address a run asks for and where it came from, worded for a message ("" without one)."""
    configured = (cfg.ray_kwargs.ray_init or {}).get("address")
    if configured:
        return configured, f"ray_kwargs.ray_init.address={configured}"
    from_environment = os.environ.get("RAY_ADDRESS")
    if from_environment:
        return from_environment, f"the RAY_ADDRESS environment variable ({from_environment})"
    return None, ""


def _warn_if_ray_init_is_set(cfg) -> None:
    from hybridrl.config.schema_trainer import RayKwargsConfig

    defaults = RayKwargsConfig().ray_init
    ray_init = cfg.ray_kwargs.ray_init or {}
    settings = [f"{key}={value}" for key, value in ray_init.items()
                if key != "address" and (key not in defaults or value != defaults[key])]  # address: warned above
    if settings:
        _warn_once(f"ray_kwargs.ray_init ({', '.join(settings)}) applies to Ray runs only and is not used by this "
                   f"run's local launcher (trainer.launcher={cfg.trainer.launcher}); set trainer.launcher=ray to "
                   f"run on Ray, or drop these keys")


_WARNINGS_GIVEN: set[str] = set()  # by configured_launcher in this process


def _warn_once(message: str) -> None:
    if message not in _WARNINGS_GIVEN:
        _WARNINGS_GIVEN.add(message)
        logger.warning(message)
