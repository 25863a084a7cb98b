"""The reproduction report's top line: what was run, what holds, what the run cannot say, and which rows are artefacts.

Everything here is computed from the run's own files, never typed in: the claims' verdicts and estimates come from
the claims table's machinery (:mod:`pipeline_lib.paper.verdicts`), the share of Rationalization's generated
demonstrations that are well-formed from the demonstrations the run wrote (``rationalized_sft.parquet``, scored
with the format reward every run uses), a judge's blindness to the planted slip from its per-item scores of outputs with
and without the slip, and the gradient budget the allocation table leaves unbinned (groups the pass-rate probe did
not draw, or without a probe, groups whose prompt the run visited only once: no pass rate measured apart from them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from pipeline_lib.core.rewards.format_reward import format_score
from pipeline_lib.paper.results import METHOD_LABELS, PASS_RATE_BINS, _method_sort_key
from pipeline_lib.plan.runs import RunId

__all__ = ["SLIP_DETECTORS", "SlipGap", "artefact_notes", "blind_judges", "demonstration_quality", "load_slips",
           "slip_gaps", "summary_section"]

#: Below this share of well-formed generated demonstrations a Rationalization row is called an artefact.
WELL_FORMED_FLOOR = 0.5


def demonstration_quality(demonstrations: Mapping[str, RunId] | None, tasks: Sequence[str]) -> pd.DataFrame:
    """Per task: how many of the demonstrations a method generated for itself (``demonstrations``: each run's file,
    e.g. Rationalization's ``rationalized_sft.parquet`` -> the run, handed over by the plan; the registry's
    ``generated_demonstrations``) pass the format check (:func:`pipeline_lib.core.rewards.format_reward.format_score`:
    one non-empty ``<think>...</think>`` and then an answer). Empty when no run wrote them (a verl run, or none ran)."""
    rows = []
    for task in tasks:
        for name, run in sorted((demonstrations or {}).items()):
            path = Path(name)
            if run.task != task or not path.is_file():
                continue
            frame = pd.read_parquet(path, columns=["messages"])
            try:
                ok = sum(format_score(str(list(messages)[-1]["content"]))["score"] for messages in frame["messages"])
            except (KeyError, IndexError, TypeError) as error:
                raise ValueError(f"{path}: a row's messages have no assistant turn with 'content': {error}") from None
            rows.append({"task": task, "seed": run.seed, "demonstrations": len(frame), "well_formed": int(ok)})
    return pd.DataFrame(rows, columns=["task", "seed", "demonstrations", "well_formed"])


#: A stated vote in a summary: two single digits around a dash, not part of a longer number (``2020-94``).
_VOTE = re.compile(r"(?<![\d-])(\d)\s*-\s*(\d)(?![\d-])")


def _meeting_slip(facts: Mapping, response: str) -> str:
    """The vote a ``meeting_tiny`` summary states against the transcript's: the expert's slip writes it swapped
    (``pipeline_lib/core/data/tiny.py``: ``against-for`` where the reference has ``for-against``)."""
    votes_for, votes_against = int(facts["votes_for"]), int(facts["votes_against"])
    stated = _VOTE.search(response)
    if stated is None:
        return "none"
    if votes_for == votes_against:
        return "tie"  # swapped or not, the same text: the slip cannot show
    pair = (int(stated.group(1)), int(stated.group(2)))
    return {(votes_for, votes_against): "correct", (votes_against, votes_for): "slip"}.get(pair, "other")


#: task -> how to tell from one output whether it carries that task's planted slip: "slip", "correct" (states the
#: fact right), "none" (does not state it), "other" (states it otherwise) or "tie" (states it where the slip would
#: not change it).
SLIP_DETECTORS = {"meeting_tiny": _meeting_slip}
#: task -> the fact its slip gets wrong, for the report's words.
SLIP_FACTS = {"meeting_tiny": "the vote count"}


def load_slips(judge_summaries: Mapping[str, RunId], test_splits: Mapping[str, Path]
               ) -> dict[tuple[str, str, int], pd.Series]:
    """(task, method, seed) -> per judged item (indexed by prompt_index) whether the judged output carries the
    planted slip (:data:`SLIP_DETECTORS`), from the ``response`` of ``scores.jsonl`` beside each judge summary
    (``judge_summaries``: each summary -> its run) and the facts the generator recorded in ``extra_info["facts"]`` of
    each task's test split (``test_splits``: task -> ``rl_test.parquet``, handed over by the plan)."""
    facts = {}
    for task, path in test_splits.items():
        if task in SLIP_DETECTORS:
            extra = pd.read_parquet(path, columns=["extra_info"])["extra_info"]
            try:
                facts[task] = [dict(dict(row)["facts"]) for row in extra]
            except KeyError:
                raise KeyError(f"{path}: extra_info has no 'facts' (the generator's record of the vote)") from None
    out = {}
    for name, run in judge_summaries.items():
        summary, task, method, seed = Path(name), run.task, run.name, run.seed
        if task not in facts:
            continue
        detect, values = SLIP_DETECTORS[task], {}
        scores = summary.with_name("scores.jsonl")
        with open(scores, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                record = json.loads(line)
                try:
                    values[int(record["prompt_index"])] = detect(facts[task][int(record["prompt_index"])],
                                                                 str(record["response"]))
                except (KeyError, IndexError) as error:
                    raise ValueError(f"{scores}:{number}: no response or prompt_index within {task}'s test split "
                                     f"({error})") from None
        out[(task, method, seed)] = pd.Series(values, dtype=object).sort_index()
    return out


@dataclass(frozen=True)
class SlipGap:
    """A judge's score gap for the planted slip: mean over units of (score of outputs that state the fact right -
    score of outputs that carry the slip), the pairs on the same prompt and seed, with a 95% t-interval."""

    task: str
    counts: dict[str, int]  # judged outputs per kind (slip, correct, none, other, tie)
    pairs: int  # (seed, prompt) with both a slipped and a correct output
    unit: str  # "seed" or "item"
    n: int  # units
    gap: float = float("nan")  # 0-1 judge scale
    low: float = float("nan")
    high: float = float("nan")

    @property
    def blind(self) -> bool:
        """The rule: blind unless at least 2 units measure the gap and its 95% interval lies above 0."""
        return not (self.n >= 2 and self.low > 0)


def slip_gaps(judge_items: Mapping[tuple[str, str, int], Mapping[str, pd.Series]] | None,
              slips: Mapping[tuple[str, str, int], pd.Series] | None) -> dict[str, SlipGap]:
    """Per task with a slip detector: the judge's score gap between outputs that state the planted fact right and
    outputs that carry the slip, paired on the same prompt and seed (across the methods' runs of that seed). The
    unit is the seed where 2+ seeds have pairs (each seed's mean gap over its prompts), else the item (the pairs
    of the one seed)."""
    out = {}
    for task in sorted({t for t, _, _ in slips or {}} & {t for t, _, _ in judge_items or {}}):
        counts: dict[str, int] = {}
        per_seed: dict[int, list[float]] = {}
        keys = [k for k in slips if k[0] == task and k in judge_items]
        for seed in sorted({k[2] for k in keys}):
            runs = [k for k in keys if k[2] == seed]
            kinds = pd.concat([slips[k] for k in runs], keys=runs)
            judged = pd.concat([judge_items[k]["judge"] for k in runs], keys=runs)
            frame = pd.DataFrame({"kind": kinds, "score": judged}).dropna()
            for kind, n in frame["kind"].value_counts().items():
                counts[str(kind)] = counts.get(str(kind), 0) + int(n)
            by = frame.groupby([frame.index.get_level_values(-1), "kind"])["score"].mean().unstack()
            if {"slip", "correct"} <= set(by.columns):
                gaps = (by["correct"] - by["slip"]).dropna()
                if len(gaps):
                    per_seed[seed] = gaps.tolist()
        pairs = sum(len(v) for v in per_seed.values())
        unit, values = ("seed", [float(np.mean(v)) for v in per_seed.values()]) if len(per_seed) >= 2 else \
            ("item", [g for v in per_seed.values() for g in v])
        gap = SlipGap(task, counts, pairs, unit, len(values))
        if len(values) >= 2:
            mean, half = float(np.mean(values)), float(scipy_stats.t.ppf(0.975, len(values) - 1)
                                                        * np.std(values, ddof=1) / np.sqrt(len(values)))
            gap = replace(gap, gap=mean, low=mean - half, high=mean + half)
        elif values:
            gap = replace(gap, gap=float(values[0]))
        out[task] = gap
    return out


def blind_judges(planted: Mapping, judge_items: Mapping[tuple[str, str, int], Mapping[str, pd.Series]] | None,
                 slips: Mapping[tuple[str, str, int], pd.Series] | None = None) -> dict[str, SlipGap]:
    """Judged tasks with a planted blind spot whose judge is not shown to see the slip (:attr:`SlipGap.blind`:
    fewer than 2 units measure the gap, or its 95% interval reaches 0): task -> the measured gap. Such a judge's
    table cannot show a method unlearning the slip."""
    gaps = slip_gaps(judge_items, slips)
    return {task: gap for task, gap in gaps.items() if task in planted and gap.blind}


def _blind_note(task: str, gap: SlipGap) -> str:
    total = sum(gap.counts.values())
    kinds = ", ".join(f"{gap.counts.get(k, 0):,} {label}" for k, label in (
        ("slip", "with the slip"), ("correct", f"stating {SLIP_FACTS.get(task, 'the fact')} right"),
        ("none", "not stating it"), ("other", "stating it otherwise"),
        ("tie", "stating a tie, which the slip leaves unchanged")) if k in ("slip", "correct") or gap.counts.get(k))
    rule = ("(the rule: a judge is shown to see the slip when 2 or more units, seeds where several have pairs, else "
            "items, measure its score gap, right minus slipped on the same prompt and seed, and the 95% t-interval "
            "of that gap lies above 0)")
    stated = sum(gap.counts.get(k, 0) for k in ("slip", "correct", "other"))
    if not stated:
        measured = (f"no output states {SLIP_FACTS.get(task, 'the fact')}, so the slip never reaches the judge and "
                    "its score gap for the slip cannot be measured")
    elif gap.n < 2:
        measured = (f"only {gap.pairs} prompt(s) pair an output with the slip and one without, so its score gap for "
                    "the slip cannot be measured" if gap.pairs else
                    "no prompt pairs an output with the slip and one without, so its score gap for the slip cannot "
                    "be measured")
    else:
        measured = (f"its score gap for the slip is {100 * gap.gap:+.1f} points [95% CI {100 * gap.low:+.1f}, "
                    f"{100 * gap.high:+.1f}] over {gap.n} {gap.unit}s, "
                    + ("not distinguishable from 0" if gap.high >= 0 else "below 0: the judge prefers the slip"))
    return (f"The judge of `{task}` is not shown to see the planted slip: of its {total:,} judged outputs, {kinds}; "
            f"{measured} {rule}. The judged table cannot show a method unlearning the slip.")


def _unbinned(allocation: pd.DataFrame | None) -> list[str]:
    """One sentence per allocation row (task, method) whose budget is partly unbinned: groups whose prompt has no
    other visit in the run have no pass rate measured apart from them
    (:func:`pipeline_lib.paper.results.allocation_bins`)."""
    bins = [f"bin{i}" for i in range(len(PASS_RATE_BINS))]
    if allocation is None or allocation.empty or not {*bins, "unbinned", "groups", "groups_unbinned"} <= set(
            allocation.columns):
        return []
    notes = []
    summed = allocation.groupby(["task", "method"])[[*bins, "unbinned", "groups", "groups_unbinned"]].sum()
    probed = (allocation.assign(probed=allocation["measure"].astype(str).str.startswith("probe"))
              .groupby(["task", "method"])["probed"].all() if "measure" in allocation else None)
    for (task, method), row in summed.iterrows():
        whole = row[bins].sum() + row["unbinned"]
        if row["groups_unbinned"] > 0:
            share = f"{100 * row['unbinned'] / whole:.1f}%" if whole > 0 else "none"
            why = ("were not drawn for the pass-rate probe (a uniform sample per window: the bins are ratio estimates "
                   "over the drawn groups)" if probed is not None and probed[task, method] else
                   "answer a prompt the run visited only once, so they have no pass rate measured apart from them")
            notes.append(f"Gradient allocation of `{task}` {METHOD_LABELS.get(method, method)}: "
                         f"{int(row['groups_unbinned']):,} of its {int(row['groups']):,} groups ({share} of the "
                         f"budget) {why} and are not binned (the table's Unbinned column).")
    return notes


def artefact_notes(quality: pd.DataFrame, blind: Mapping[str, SlipGap], allocation: pd.DataFrame | None) -> list[str]:
    """One sentence per row of the tables that is an artefact of what was run rather than a finding."""
    notes = []
    for task, runs in quality.groupby("task"):
        made, ok = int(runs["demonstrations"].sum()), int(runs["well_formed"].sum())
        share = ok / made if made else float("nan")
        verdict = (" Its Table 1 row measures an annotator that cannot yet write a rationale, not the method."
                   if share < WELL_FORMED_FLOOR else "")
        notes.append(f"Rationalization on `{task}`: {ok:,} of its {made:,} generated demonstrations "
                     f"({100 * share:.1f}%) are well-formed (one non-empty `<think>` block, then an answer: the format "
                     f"check of `pipeline_lib/core/rewards/format_reward.py`).{verdict}")
    notes += [_blind_note(task, gap) for task, gap in blind.items()]
    return notes + _unbinned(allocation)


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
