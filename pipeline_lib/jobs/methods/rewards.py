"""Rollout rewards on every engine: a rollout's training reward and its correctness, read from the reward registry.

The local trainers, TRL's Iterative DPO and the evaluation score rollouts through these (:func:`verifier_info` is what
makes a score the task verifier's rather than a training composition's), so a change of what counts as correct
reaches every engine at once and no engine imports another for it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import torch

from pipeline_lib.core.rewards import DATA_SOURCE_REWARDS, compute_scores

__all__ = ["rollout_rewards", "verifier_info"]


def verifier_info(data_source: str, extra_info: Any) -> dict[str, Any]:
    """The row's ``extra_info`` without a training composition, so its data source's verifier scores it (a source
    with no registered default keeps the row's own composition, as training scored it)."""
    info = dict(extra_info)
    if data_source in DATA_SOURCE_REWARDS:
        info.pop("reward_weights", None)
    return info


def _correct(result: dict[str, float], data_source: str) -> float:
    """A rollout's correctness: the verifier's ``acc`` (in a composite reward, its verifier components' ``acc``: a
    right answer under ``{math: 0.5, format: 1.0}`` is correct), else a full score."""
    if "acc" in result:
        return float(result["acc"])
    accs = [result[f"{name}/acc"] for name in DATA_SOURCE_REWARDS.get(data_source, {}) if f"{name}/acc" in result]
    return float(min(accs) >= 1.0) if accs else float(result["score"] >= 1.0)


def rollout_rewards(frame: pd.DataFrame, rows: list[int], texts: list[str], weights: dict | None,
                    verifier: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Reward and correctness per rollout (:func:`_correct`); with ``verifier`` the reward is the task verifier's
    (the data source's own composition, not a training composition in the rows' ``extra_info``)."""
    records = frame.iloc[rows]
    sources = list(records["data_source"])
    infos = [verifier_info(d, e) if verifier else dict(e) for d, e in zip(sources, records["extra_info"], strict=True)]
    results = compute_scores(sources, texts, [r["ground_truth"] for r in records["reward_model"]], infos, weights)
    rewards = [r["score"] for r in results]
    correct = [_correct(r, source) for r, source in zip(results, sources, strict=True)]
    return torch.tensor(rewards, dtype=torch.float32), torch.tensor(correct, dtype=torch.float32)
