"""The VeRL engine: the paper's GPU runs (App. B) driven by verl 0.9.1 on a Slurm cluster.

* :mod:`.estimators` registers our advantage estimators with verl (also loaded as a ``verl.plugins``
  entry point, so every Ray worker that imports verl has them);
* :mod:`.translate` turns a pipeline run spec into Hydra overrides for ``verl.trainer.main_ppo``
  (RL), :mod:`.overrides` for ``verl.trainer.sft_trainer`` (SFT); both are plain Python and never import verl;
* :mod:`.validate` composes verl's own config with those overrides and runs verl's checks (no GPU);
* :mod:`.sft` and :mod:`.train` are the entry points the Snakemake rules call (SFT; RL), on the steps every
  verl run shares (:mod:`.runner`); SFT's imports no RL code (its overrides: :mod:`.overrides`, its check:
  :mod:`.compose`).

The pin is recorded here, as verl-recipe does: the estimator signature, the config tree and the
checkpoint layout this package relies on were read from, and tested against, exactly this version.
Every module that uses verl (estimators, the checks, the training entry points) checks it when imported, so a
wrong verl fails with a clear message before anything runs; the translator is plain Python and importing it (as the
Snakefile always does, whatever the engine) never requires verl.
"""

from __future__ import annotations

from importlib import metadata

__all__ = ["REQUIRED_VERL", "VerlVersionError", "check_verl_version", "installed_verl_version"]

REQUIRED_VERL = "0.9.1"


class VerlVersionError(ImportError):
    """verl is missing or is not the version this engine was written and tested against."""


def installed_verl_version() -> str | None:
    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return None


def check_verl_version() -> str:
    """The installed verl version; raises a clear error unless it is :data:`REQUIRED_VERL`."""
    found = installed_verl_version()
    if found is None:
        raise VerlVersionError(
            f"the verl engine needs verl=={REQUIRED_VERL}, which is not installed: "
            f"`pip install verl=={REQUIRED_VERL}` (CPU: no extras; GPU cluster: `pip install -e '.[gpu]'`)"
        )
    if found != REQUIRED_VERL:
        raise VerlVersionError(
            f"the verl engine is pinned to verl=={REQUIRED_VERL} (pipeline_lib.jobs.engines.verl.REQUIRED_VERL) but "
            f"verl=={found} is installed; install the pinned version, or re-verify the engine against {found} "
            "(estimator signature, config keys, checkpoint layout) and move the pin"
        )
    return found
