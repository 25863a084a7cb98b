"""Target lists for the Snakefile's named targets (``all``, ``data``, ``train``...).

Built here, not in ``common.smk``, so they are plain tested Python. Each stage's
issue extends :func:`stage_targets` with the outputs its rules make.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["STAGES", "THEORY_OUTPUTS", "stage_targets"]

STAGES = ("data", "train", "eval", "judge", "paper")

THEORY_OUTPUTS = (
    "results/paper/theory_verification.md",
    "results/paper/theory_verification.json",
    "results/paper/figures/fig1a_advantage_magnitude.png",
    "results/paper/figures/fig1a_advantage_magnitude.pdf",
    "results/paper/figures/fig1b_weight_functions.png",
    "results/paper/figures/fig1b_weight_functions.pdf",
    "results/paper/tables/weight_view.tex",
    "results/paper/tables/weight_view.md",
    "results/paper/tables/weight_view.csv",
)


def stage_targets(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """Final outputs per stage, plus ``all`` = every stage's targets in order."""
    targets: dict[str, list[str]] = {stage: [] for stage in STAGES}
    targets["paper"] += THEORY_OUTPUTS
    targets["all"] = [path for stage in STAGES for path in targets[stage]]
    return targets
