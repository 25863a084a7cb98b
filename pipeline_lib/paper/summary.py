"""The reproduction report's top line: what was run, what holds, what the run cannot say, and which rows are artefacts.

Everything here is computed from the run's own files, never typed in: the claims' verdicts and estimates come from
the claims table's machinery (:mod:`pipeline_lib.paper.verdicts`), the share of Rationalization's generated
demonstrations that are well-formed from the demonstrations the run wrote (``rationalized_sft.parquet``, scored
with the format reward every run uses), a judge's blindness to the planted slip from its per-item scores on the
blind spot, and the allocation bins no run can fill from the group size and reward the runs logged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline_lib.paper.allocation_split import bin_names, unfillable_bins
from pipeline_lib.paper.results import METHOD_LABELS, _method_sort_key
from pipeline_lib.rewards.format_reward import format_score

__all__ = ["artefact_notes", "blind_judges", "demonstration_quality", "summary_section"]

#: Below this share of well-formed generated demonstrations a Rationalization row is called an artefact.
WELL_FORMED_FLOOR = 0.5
#: Judge scores (0-1) closer than this across methods on the blind spot count as unchanged (0.05 of 100 points:
#: equal at the report's one decimal).
UNCHANGED = 5e-4


def demonstration_quality(train_root: Path | None, tasks: Sequence[str]) -> pd.DataFrame:
    """Per task: how many of Rationalization's generated demonstrations (every seed's ``rationalized_sft.parquet``)
    pass the format check (:func:`pipeline_lib.rewards.format_reward.format_score`: one non-empty
    ``<think>...</think>`` and then an answer). Empty when no run wrote them (a verl run, or none ran)."""
    rows = []
    for task in tasks if train_root is not None else ():
        for path in sorted((train_root / task / "rationalization").glob("seed*/rationalized_sft.parquet")):
            frame = pd.read_parquet(path, columns=["messages"])
            try:
                ok = sum(format_score(str(list(messages)[-1]["content"]))["score"] for messages in frame["messages"])
            except (KeyError, IndexError, TypeError) as error:
                raise ValueError(f"{path}: a row's messages have no assistant turn with 'content': {error}") from None
            rows.append({"task": task, "seed": path.parent.name, "demonstrations": len(frame), "well_formed": int(ok)})
    return pd.DataFrame(rows, columns=["task", "seed", "demonstrations", "well_formed"])


def blind_judges(planted: Mapping, judge_items: Mapping[tuple[str, str, int], Mapping[str, pd.Series]] | None
                 ) -> dict[str, float]:
    """Judged tasks with a planted blind spot whose judge score there is the same for every method (SFT, which
    imitates the slip, and the methods that may unlearn it): task -> that score (0-1). Such a judge cannot see the
    slip, so its table cannot show a method fixing it."""
    out = {}
    for task in sorted({t for t, _, _ in judge_items or {}} & set(planted)):
        flags = planted[task].blind_spot
        prompts = flags.index[flags.to_numpy()]
        means: dict[str, list[float]] = {}
        for (t, method, _), per in (judge_items or {}).items():
            values = per["judge"].loc[per["judge"].index.intersection(prompts)] if t == task else None
            if values is not None and len(values):
                means.setdefault(method, []).append(float(values.mean()))
        levels = [float(np.mean(v)) for v in means.values()]
        if len(levels) >= 2 and max(levels) - min(levels) < UNCHANGED:
            out[task] = float(np.mean(levels))
    return out


def _unfillable(allocation: pd.DataFrame | None) -> list[str]:
    if allocation is None or allocation.empty or not {"group_size", "binary_reward"} <= set(allocation.columns):
        return []
    reasons = []
    for (size, binary), _ in allocation.groupby(["group_size", "binary_reward"]):
        for i, reason in unfillable_bins(int(size), bool(binary)).items():
            reasons.append(f"The gradient-allocation bin {bin_names()[i]} is empty by construction: {reason}.")
    return list(dict.fromkeys(reasons))


def artefact_notes(quality: pd.DataFrame, blind: Mapping[str, float], allocation: pd.DataFrame | None) -> list[str]:
    """One sentence per row of the tables that is an artefact of what was run rather than a finding."""
    notes = []
    for task, runs in quality.groupby("task"):
        made, ok = int(runs["demonstrations"].sum()), int(runs["well_formed"].sum())
        share = ok / made if made else float("nan")
        verdict = (" Its Table 1 row measures an annotator that cannot yet write a rationale, not the method."
                   if share < WELL_FORMED_FLOOR else "")
        notes.append(f"Rationalization on `{task}`: {ok:,} of its {made:,} generated demonstrations "
                     f"({100 * share:.1f}%) are well-formed (one non-empty `<think>` block, then an answer: the format "
                     f"check of `pipeline_lib/rewards/format_reward.py`).{verdict}")
    for task, level in blind.items():
        notes.append(f"The judge of `{task}` does not see the planted slip: its score on the blind-spot prompts is "
                     f"{100 * level:.1f} for every method, SFT included, so the judged table cannot show a method "
                     "unlearning it.")
    return notes + _unfillable(allocation)


def _runs_line(label: str, table1: pd.DataFrame | None,
               judge_items: Mapping[tuple[str, str, int], object] | None) -> str:
    runs = set()
    if table1 is not None and not table1.empty:
        runs |= {(r.task, r.method, int(r.seed)) for r in table1[["task", "method", "seed"]].itertuples(index=False)}
    runs |= set(judge_items or {})
    if not runs:
        return f"Run label `{label}`: no evaluated runs."
    tasks = sorted({t for t, _, _ in runs})
    methods = sorted({m for _, m, _ in runs}, key=_method_sort_key)
    seeds = sorted({s for _, _, s in runs})
    return (f"Run label `{label}`: {len(runs)} evaluated runs over {len(tasks)} task(s) ({', '.join(tasks)}), "
            f"{len(methods)} method(s) ({', '.join(METHOD_LABELS.get(m, m) for m in methods)}) and "
            f"{len(seeds)} seed(s) ({', '.join(map(str, seeds))}).")


def summary_section(label: str, table1: pd.DataFrame | None, judge_items: Mapping | None,
                    claims: Sequence[tuple[str, str, str, str]], cannot: Sequence[str],
                    artefacts: Sequence[str]) -> list[str]:
    """The report's opening: ``claims`` are (claim, task, evidence, verdict) as the claims table computes them,
    ``cannot`` what this run cannot speak to, ``artefacts`` from :func:`artefact_notes`."""
    held = [f"- {verdict}: {claim} (`{task}`): {evidence}." for claim, task, evidence, verdict in claims]
    parts = ["## Summary", "", "What was run: " + _runs_line(label, table1, judge_items), "",
             "What holds (the claims table's verdicts, or estimates where there are too few seeds for one):", "",
             *(held or ["- No claim of the paper has a paired result in this run."]), ""]
    if artefacts:
        parts += ["Rows that are artefacts, not findings:", "", *(f"- {a}" for a in artefacts), ""]
    if cannot:
        parts += ["What this run cannot say:", "", *(f"- {c}" for c in cannot), ""]
    return parts
