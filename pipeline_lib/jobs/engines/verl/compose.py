"""verl's own config composed with a run's overrides, and the check of an SFT run's (``sft_trainer_engine``).

Apart from :mod:`.checks` (the RL checks, which run the advantage estimators and load the reward hook), so the verl SFT
entry point (:mod:`.sft`) imports no RL code and its code digest covers none (issue 58).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline_lib.jobs.engines.verl import REQUIRED_VERL, check_verl_version

check_verl_version()  # the pin (REQUIRED_VERL), checked when the engine is imported

__all__ = ["VerlOverrideError", "compose", "validate_sft"]


class VerlOverrideError(ValueError):
    """verl rejected a run's overrides; the message names the run and verl's own complaint."""


def _config_dir() -> str:
    """verl's Hydra config directory, found without importing verl (its import takes seconds)."""
    check_verl_version()
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("verl is not installed")
    return str(Path(next(iter(spec.submodule_search_locations))).resolve() / "trainer" / "config")


def compose(config_name: str, overrides: Sequence[str]) -> Any:
    """verl's config ``config_name`` composed with ``overrides`` via Hydra's compose API (struct mode kept)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=_config_dir(), version_base=None):
        return hydra_compose(config_name=config_name, overrides=list(overrides))


def validate_sft(overrides: Sequence[str], label: str = "SFT run") -> Any:
    """The composed, checked ``sft_trainer_engine`` config; raises :class:`VerlOverrideError` naming ``label``."""
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    step = "composing verl's sft_trainer_engine config"
    try:
        config = compose("sft_trainer_engine", overrides)
        step = "resolving interpolations"
        OmegaConf.to_container(config, resolve=True)
        step = "building verl's engine/optim/checkpoint dataclass configs"
        for section in ("engine", "optim", "checkpoint"):
            omega_conf_to_dataclass(config[section])
        step = "checking batch sizes"
        data, trainer = config.data, config.trainer
        world = trainer.n_gpus_per_node * trainer.nnodes
        if data.train_batch_size % world:
            raise ValueError(f"data.train_batch_size ({data.train_batch_size}) must be divisible by the "
                             f"{world} GPUs")
        if data.truncation not in ("error", "left", "right"):
            raise ValueError(f"data.truncation must be error/left/right, got {data.truncation!r}")
    except Exception as exc:
        raise VerlOverrideError(f"{label}: verl {REQUIRED_VERL} rejected the overrides while {step}: "
                                f"{type(exc).__name__}: {exc}") from exc
    return config
