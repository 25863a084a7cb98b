"""Our group advantage estimators, registered with verl's ``register_adv_est``.

Loaded three ways, so the registration reaches every process that computes advantages: imported by
:mod:`.train` / :mod:`.validate` in the driver; as the ``verl.plugins`` entry point ``softmaxgrpo``
(``pyproject.toml``) that ``import verl`` loads in every process, Ray workers included; and, as a
fallback for environments where entry points are disabled or the package metadata is not visible,
through ``VERL_USE_EXTERNAL_MODULES`` set in the Ray runtime env by the translator.

Every estimator delegates to :func:`pipeline_lib.core.rl.advantages.group_advantages`, the same functions the
local engine and the theory code use, so verl trains with exactly the numbers the tests check.
Method hyperparameters are extra keys of verl's ``algorithm`` config (``+algorithm.tau=0.1``), read
from the config object verl passes to the estimator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from typing import Any

import torch

from pipeline_lib.jobs.engines.verl import check_verl_version

check_verl_version()  # before touching verl's API (the pin: pipeline_lib.jobs.engines.verl.REQUIRED_VERL)

from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est  # noqa: E402

from pipeline_lib.core.rl.advantages import broadcast_to_tokens, group_advantages  # noqa: E402
from pipeline_lib.core.rl.estimators import estimator, verl_estimators  # noqa: E402
from pipeline_lib.jobs.engines.verl.logprobs import install as install_logprobs  # noqa: E402
from pipeline_lib.jobs.engines.verl.step_metrics import group_index, install_on_import  # noqa: E402

__all__ = ["REGISTERED_WITH_VERL", "group_index", "register"]

#: verl estimator name -> (our registry's estimator, algorithm-config keys passed as its parameters): every estimator
#: the method registry marks as ours (pipeline_lib.core.rl.estimators.ADVANTAGE_ESTIMATORS).
REGISTERED_WITH_VERL: dict[str, tuple[str, tuple[str, ...]]] = verl_estimators()


def _params(name: str, method: str, keys: tuple[str, ...], config: Mapping[str, Any] | None) -> dict[str, float]:
    """The estimator's parameters from verl's algorithm config; one with a default in its parameter dataclass may be
    left out (the estimator's function then takes that default: GRPO's and MaxRL's ``eps``)."""
    optional = {f.name for f in fields(estimator(method).params) if f.default is not MISSING}
    params = {}
    for key in keys:
        value = config.get(key) if config is not None else None
        if value is None and key in optional:
            continue
        if value is None:
            raise ValueError(
                f"verl advantage estimator {name!r} needs algorithm.{key}, which the algorithm config it received "
                f"does not have; pass it as the Hydra override +algorithm.{key}=<value>"
            )
        params[key] = float(value)
    return params


def _make(name: str, method: str, keys: tuple[str, ...]) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any,
        config: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Outcome advantages: one scalar per rollout (summed token rewards), broadcast over its response."""
        params = _params(name, method, keys, config)
        with torch.no_grad():
            scores = token_level_rewards.sum(dim=-1)
            groups = group_index(index).to(scores.device)
            advantages = broadcast_to_tokens(group_advantages(method, scores, groups, **params), response_mask)
        return advantages, advantages

    estimator.__name__ = estimator.__qualname__ = f"pipeline_{name}_advantage"
    return estimator


def register() -> None:
    """Register every estimator once (idempotent: a second import must not trip verl's duplicate check); one the
    method registry gained since (a test's toy estimator) is registered by a second call. Also arms the trainer's
    live ``softmaxgrpo/*`` curves (:mod:`.step_metrics`) and replaces verl's per-row log-prob fallback
    (:mod:`.logprobs`) in this process."""
    REGISTERED_WITH_VERL.update(verl_estimators())
    for name, (method, keys) in REGISTERED_WITH_VERL.items():
        if name not in ADV_ESTIMATOR_REGISTRY:
            register_adv_est(name)(_make(name, method, keys))
    install_on_import()
    install_logprobs()


register()
