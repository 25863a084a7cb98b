"""``reproduction_report.md``: our tables beside the paper's, paired differences with intervals, and a claim ledger.

Only a ``paper``-labelled run is compared number for number. A ``tiny`` (or ``test``) run maps its
miniature tasks onto the paper's columns for orientation (``countdown_tiny`` ~ Countdown,
``arith_tiny`` ~ GSM8K) but prints no deltas against the paper: a sub-million-parameter model on
synthetic tasks is not the paper's 1.5B model.

What every run can judge on its own is *within-run* comparisons, and those are paired: methods
share seeds (same start, same data order) and test prompts, so each difference is shown with
a 95% interval whose unit is the training seed (:func:`pipeline_lib.core.stats.paired_interval`; seeds
only for one-number-per-run quantities such as the gradient-allocation share). The claim ledger at
the end gives each claim a verdict by the rules of :mod:`pipeline_lib.paper.verdicts` (supported,
contradicted, inconclusive, or an estimate with no verdict below ``report.min_seeds`` seeds), with
Holm's family-wise adjustment over the table.

    python -m pipeline_lib.paper.reproduction --reference config/paper_reference.yaml --label tiny \
        --table1 results/paper/data/table1.csv --allocation results/paper/data/gradient_allocation.csv \
        --eval-root results/eval --judge-summaries RUNS.json \
        --made nonverifiable=results/paper/tables/nonverifiable.md ... --min-seeds 3 --out R.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline_lib.core.cli import entry_parser, json_value
from pipeline_lib.core.io import read_csv_frame, write_text
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.core.rubrics import RUBRICS
from pipeline_lib.core.stats import INTERVAL_METHOD, PairedDifference, paired_interval
from pipeline_lib.core.yaml_files import load_yaml
from pipeline_lib.paper.allocation_split import ALLOCATION_CLAIMS, allocation_split, claim_share, split_section
from pipeline_lib.paper.captions import base_done_records, base_note, paper_gaps
from pipeline_lib.paper.contents import PAPER_TRANSFER, RunContents, cannot_say, run_contents
from pipeline_lib.paper.machines import machines_section, run_machines
from pipeline_lib.paper.miniature import load_planted, miniature_section, planted_limits
from pipeline_lib.paper.results import (
    METHOD_LABELS,
    PASS_RATE_BINS,
    PASS_RATE_MEASURE,
    run_ids_argument,
    runs_record,
)
from pipeline_lib.paper.summary import artefact_notes, blind_judges, demonstration_quality, load_slips, summary_section
from pipeline_lib.paper.tables import to_markdown
from pipeline_lib.paper.verdicts import MIN_SEEDS, rules, verdicts
from pipeline_lib.plan.registry import METHODS, PlanError
from pipeline_lib.plan.runs import RunId

#: Which paper column each of our tasks stands in for.
TASK_TO_PAPER = {"gsm8k": "gsm8k", "countdown": "countdown", "deepmath": "deepmath",
                 "arith_tiny": "gsm8k", "countdown_tiny": "countdown", "poetry": "poetry",
                 "meetingbank": "meetingbank", "meeting_tiny": "meetingbank"}
#: Sections of config/paper_reference.yaml besides Table 1 and the gradient allocation, by the table that makes them.
OTHER_TABLES = {"nonverifiable": "nonverifiable", "ablation_gsm8k": "ablation", "ablation_countdown": "ablation",
                "scale": "scale", "judge_validation": "judge_validation"}
#: The paired differences the report states, by table, in the report's order: ``(a, b)`` is a minus b, each a
#: registry method (``verifiable``: Table 1's metrics; ``nonverifiable``: the judge score).
PAIRS: dict[str, tuple[tuple[str, str], ...]] = {
    "verifiable": (("softmax_exact", "grpo_exact"), ("softmax_sim", "grpo_sim"), ("grpo_exact", "sft"),
                   ("softmax_exact", "sft"), ("grpo_sim", "sft"), ("softmax_sim", "sft")),
    "nonverifiable": (("softmax_sim", "grpo_sim"), ("softmax_sim", "sft"), ("grpo_sim", "sft"),
                      ("softmax_sim", "opd")),
}
_unregistered = sorted({name for pairs in PAIRS.values() for pair in pairs for name in pair} - set(METHODS))
if _unregistered:
    raise PlanError(f"pipeline_lib/paper/reproduction.py PAIRS names methods the registry lacks: {_unregistered}")
VERIFIABLE_PAIRS = PAIRS["verifiable"]
NONVERIFIABLE_PAIRS = PAIRS["nonverifiable"]
METRICS = {"pass@1_greedy": "greedy pass@1", "pass@1_sampled": "sampled pass@1"}


def _fmt(value: float | None) -> str:
    return "–" if value is None or pd.isna(value) else f"{value:.1f}"


def _label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def table1_section(ours: pd.DataFrame, reference: dict, comparable: bool, metric: str,
                   notes: dict[str, str] | None = None) -> str:
    """Ours beside the paper's per method; ``notes`` (method -> sentence) mark rows that are artefacts of the run
    (a dagger on the method, the sentence under the table)."""
    notes = notes or {}
    columns = reference["columns"]
    stats = ours.groupby(["method", "task"])[metric].agg(["mean", "std", "count"])
    rows = []
    for method, paper_values in reference["rows"].items():
        row = {"Method": _label(method) + (" †" * (list(notes).index(method) + 1) if method in notes else "")}
        for task in sorted(ours["task"].unique()):
            column = TASK_TO_PAPER.get(task)
            paper = paper_values[columns.index(column)] if column in columns else None
            mine = 100 * stats.loc[(method, task)]["mean"] if (method, task) in stats.index else None
            cell = f"ours {_fmt(mine)} / paper {_fmt(paper)}"
            if comparable and mine is not None and paper is not None:
                cell += f" (Δ {mine - paper:+.1f})"
            row[f"{task} (paper: {column or 'none'})"] = cell
        rows.append(row)
    marks = [f"{'†' * (i + 1)} {note}" for i, note in enumerate(notes.values())]
    table = to_markdown(pd.DataFrame(rows))
    return "\n".join([table.rstrip("\n"), "", *marks]) if marks else table


def allocation_section(ours: pd.DataFrame, reference: dict) -> str:
    """Ours / paper per bin (each bin's share of the binned budget, p by the run's pass-rate probe or over the
    prompt's other visits: :data:`pipeline_lib.paper.results.PROBE_MEASURE`, ``PASS_RATE_MEASURE``), and the unbinned
    share of ours beside them."""
    bins = [f"bin{i}" for i in range(len(PASS_RATE_BINS))]
    extra = [c for c in ("unbinned", "groups", "groups_unbinned") if c in ours.columns]
    summed = ours.groupby(["task", "method"])[[*bins, *extra]].sum()
    rows = []
    for (task, method), values in summed.iterrows():
        total = values[bins].sum()
        paper = reference["rows"].get(f"{TASK_TO_PAPER.get(task, task)}/{method}")
        row = {"Run": f"{task} {_label(method)}"}
        for i, name in enumerate(reference["columns"]):
            mine = 100 * values[bins[i]] / total if total else None
            row[name] = f"{_fmt(mine)} / {_fmt(paper[i]) if paper else '–'}"
        if "unbinned" in extra:
            whole = total + values["unbinned"]
            row["Unbinned (ours)"] = (f"{_fmt(100 * values['unbinned'] / whole if whole else None)}%"
                                      + (f" ({int(values['groups_unbinned'])}/{int(values['groups'])} groups)"
                                         if "groups" in extra and "groups_unbinned" in extra else ""))
        rows.append(row)
    return "\n".join([to_markdown(pd.DataFrame(rows)).rstrip("\n"), "", "Each bin is a share of the binned budget "
                      "(a row's bins sum to 100%). " + PASS_RATE_MEASURE])


def reward_health_section(table1: pd.DataFrame | None) -> list[str]:
    """Evaluations whose verifier timed out on, failed or could not score some items (eval's
    ``reward_{timeouts,failures,unscorable}_<mode>``): those items count as wrong in pass@1, so the report says
    where, and how many. Empty when there are none."""
    if table1 is None or table1.empty:
        return []
    columns = [c for c in table1.columns
               if c.startswith(("reward_timeouts_", "reward_failures_", "reward_unscorable_"))]
    if not columns:
        return []
    hit = table1[(table1[columns].fillna(0) > 0).any(axis=1)]
    if hit.empty:
        return []
    identity = [c for c in ("task", "method", "seed") if c in hit.columns]
    rows = hit[identity + columns].fillna(0)
    return ["## Verifier timeouts and failures", "",
            "These evaluations had items the math verifier timed out on or failed (its worker died or raised), or "
            "that a reward could not score (no gold, a non-finite gold, a malformed ground truth); each scored 0, "
            "so the pass@1 above counts them as wrong answers.", "",
            to_markdown(rows.astype({c: int for c in columns})), ""]


# --- per-prompt scores ---------------------------------------------------------------------------------------------


def prompt_scores(generations: Path) -> dict[str, pd.Series]:
    """Per test prompt (indexed by ``prompt_index``): greedy score and mean sampled score, from an eval directory's
    ``generations.jsonl``. The one reader of per-prompt scores for every paired comparison."""
    greedy: dict[int, float] = {}
    sampled: dict[int, list[float]] = {}
    with open(generations, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            record = json.loads(line)
            try:
                index, score = int(record["prompt_index"]), float(record["score"])
            except KeyError as error:
                raise KeyError(f"{generations}:{line_no}: no {error.args[0]!r}") from None
            if record["mode"] == "greedy":
                greedy[index] = score
            else:
                sampled.setdefault(index, []).append(score)
    order = sorted(greedy)
    index = pd.Index(order, name="prompt_index")
    out = {"pass@1_greedy": pd.Series([greedy[i] for i in order], index=index, dtype=np.float64)}
    if sampled:
        if sorted(sampled) != order:
            raise ValueError(f"{generations}: greedy and sampled generations cover different prompts")
        out["pass@1_sampled"] = pd.Series([np.mean(sampled[i]) for i in order], index=index, dtype=np.float64)
    return out


def load_scores(table1: pd.DataFrame, eval_root: Path) -> dict[tuple[str, str, int], dict[str, np.ndarray]]:
    """(task, method, seed) -> per-prompt scores, for every run of the Table 1 data that has generations (a row's
    run directory is its ``run``, where a reported method is one of its variants: RL-Logit's)."""
    scores = {}
    frame = table1 if "run" in table1 else table1.assign(run=table1["method"])
    for run in frame[["task", "method", "seed", "run"]].drop_duplicates().itertuples(index=False):
        path = eval_root / run.task / run.run / f"seed{run.seed}" / "generations.jsonl"
        if path.is_file():
            scores[(run.task, run.method, int(run.seed))] = prompt_scores(path)
    return scores


def load_judge_items(summaries: Mapping[str, RunId]) -> dict[tuple[str, str, int], dict[str, pd.Series]]:
    """(task, method, seed) -> per-item primary-judge score in [0, 1] from ``scores.jsonl`` beside each summary
    (``summaries``: each summary -> its run), indexed by prompt like :func:`prompt_scores`: ``judge``, the scored
    items alone (what the judge said: its blind spots, the miniature's planted effects), and ``judge_low`` /
    ``judge_high``, every item with those without a verdict (refused or failed) at the rubric's lowest / highest
    score, which the claims read (:func:`compare` with ``conservative``: issue 60, a candidate that gets its low
    verdicts refused must not have them left out of a comparison)."""
    items = {}
    for name, run in summaries.items():
        summary = Path(name)
        stated = json.loads(summary.read_text())
        if stated.get("rubric") not in RUBRICS:
            raise ValueError(f"{summary}: no rubric of {sorted(RUBRICS)} named ('rubric'), so the scale an item "
                             "without a verdict counts at is unknown; rerun its judge_score job")
        rubric = RUBRICS[stated["rubric"]]
        low, high = (rubric.normalise(dict.fromkeys(rubric.keys, end)) / 100.0 for end in rubric.scale)
        values: dict[int, float] = {}
        unscored: list[int] = []
        with open(summary.with_name("scores.jsonl"), encoding="utf-8") as handle:
            for line in handle:
                record = json.loads(line)
                if record.get("score_100") is not None:
                    values[int(record["prompt_index"])] = float(record["score_100"]) / 100.0
                else:
                    unscored.append(int(record["prompt_index"]))

        def series(fill: float | None, values: dict[int, float] = values, unscored: list[int] = unscored
                   ) -> pd.Series:
            filled = values if fill is None else values | dict.fromkeys(unscored, fill)
            return pd.Series(filled, dtype=np.float64).sort_index().rename_axis("prompt_index")

        items[(run.task, run.name, run.seed)] = {"judge": series(None), "judge_low": series(low),
                                                 "judge_high": series(high)}
    return items


@dataclass(frozen=True)
class Comparison:
    task: str
    a: str
    b: str
    metric: str
    result: PairedDifference | None
    note: str = ""
    a_mean: float = float("nan")
    b_mean: float = float("nan")


class PairingError(ValueError):
    """Two methods' runs that cannot be paired: different seeds or different test prompts."""


def compare(scores: dict[tuple[str, str, int], dict[str, pd.Series]], task: str, a: str, b: str,
            metric: str, shared_items: bool = False, *, strict: bool = False,
            sources: dict[tuple[str, str, int], Path] | None = None, conservative: bool = False) -> Comparison:
    """a minus b on the seeds both ran, over the same prompts: the one pairing of runs for every paired comparison.

    Test prompts must be identical across runs; with ``shared_items`` (judge scores, where an item the judge failed
    on is missing from that run) the pairs are the items every run has. Where pairing is impossible the result is
    None with the reason, or, with ``strict``, a :class:`PairingError` (``strict`` also requires both methods
    on the same seeds); ``sources`` (run -> its file) names the file in that error. A metric no run has (no sampled
    generations) is None with a note in either mode. ``conservative``: a's ``<metric>_low`` against b's
    ``<metric>_high`` (judge scores: items without a verdict at the end that works against the claim a > b)."""
    seeds = {m: sorted(s for (t, mm, s) in scores if t == task and mm == m) for m in (a, b)}
    if strict and seeds[a] != seeds[b]:
        raise PairingError(f"task {task}: {a} has seeds {seeds[a]} but {b} has {seeds[b]}; a paired comparison needs "
                           "both methods on the same seeds")
    shared = sorted(set(seeds[a]) & set(seeds[b]))
    if not shared:
        if strict:
            raise PairingError(f"task {task}: {a} and {b} share no seed")
        return Comparison(task, a, b, metric, None, "not run on shared seeds")
    keys = [(task, m, s) for m in (a, b) for s in shared]
    sides = {a: f"{metric}_low", b: f"{metric}_high"} if conservative else {a: metric, b: metric}
    rows = [scores[key].get(sides[key[1]]) for key in keys]
    if all(r is None for r in rows):
        return Comparison(task, a, b, metric, None, f"no {metric}")
    try:
        if any(r is None for r in rows):
            missing = next(key for key, r in zip(keys, rows, strict=True) if r is None)
            raise PairingError(f"{(sources or {}).get(missing, missing)}: no {metric} where the other runs of task "
                               f"{task} have it")
        if shared_items:
            common = rows[0].index
            for r in rows:
                common = common.intersection(r.index)
            if common.empty:
                raise PairingError("no item scored in every run")
            rows = [r.loc[common] for r in rows]
        for key, r in zip(keys, rows, strict=True):
            if not r.index.equals(rows[0].index):
                if sources is None:
                    raise PairingError("different test prompts")
                raise PairingError(f"{sources[key]}: its {metric.removeprefix('pass@1_')} scores are not on the same "
                                   f"test prompts as the other runs of task {task} ({len(rows[0])} prompts)")
    except PairingError as error:
        if strict:
            raise
        return Comparison(task, a, b, metric, None, str(error))
    matrix_a = np.stack([r.to_numpy(dtype=np.float64) for r in rows[:len(shared)]])
    matrix_b = np.stack([r.to_numpy(dtype=np.float64) for r in rows[len(shared):]])
    return Comparison(task, a, b, metric, paired_interval(matrix_a, matrix_b), a_mean=float(matrix_a.mean()),
                      b_mean=float(matrix_b.mean()))


def comparisons_section(comparisons: list[Comparison], value_name: str) -> str:
    rows = []
    for c in comparisons:
        r = c.result
        rows.append({"Task": c.task, "Comparison": f"{_label(c.a)} − {_label(c.b)}", "Metric": value_name or c.metric,
                     "Difference [95% CI] (points)": r.format(scale=100) if r else f"– ({c.note})",
                     "Interval method": r.method if r else "–",
                     "Seeds x prompts": f"{r.n_seeds} x {r.n_items}" if r else "–",
                     "Interval": _interval_word(r)})
    return to_markdown(pd.DataFrame(rows))


def _interval_word(result: PairedDifference | None) -> str:
    if result is None or not result.has_interval:
        return "–"
    return "excludes 0" if result.excludes_zero else "includes 0"


def allocation_shift(allocation: pd.DataFrame, reference: dict | None = None, a: str = "softmax_exact",
                     b: str = "grpo_exact") -> list[dict]:
    """Per task and each of the paper's statements on its column
    (:data:`pipeline_lib.paper.allocation_split.ALLOCATION_CLAIMS`, the task's column by :data:`TASK_TO_PAPER`):
    the share of the binned budget in the statement's range for ``a`` and ``b``, and their difference paired by seed,
    oriented so that a positive difference is what the paper states (``a - b`` for "more", ``b - a`` for "less").
    ``reference`` (config/paper_reference.yaml's ``gradient_allocation``) adds the paper's own shares."""
    bins = [f"bin{i}" for i in range(len(PASS_RATE_BINS))]
    out = []
    for task in sorted(allocation["task"].unique()):
        column = TASK_TO_PAPER.get(task, task)
        runs = allocation[allocation["task"] == task].set_index(["method", "seed"])
        for claim in (c for c in ALLOCATION_CLAIMS if c.column == column):
            share = {key: claim_share(row[bins].to_numpy(dtype=float), claim) for key, row in runs.iterrows()}
            share = {key: value for key, value in share.items() if np.isfinite(value)}
            seeds = sorted(s for (m, s) in share if m == a and (b, s) in share)
            first, second = (a, b) if claim.more else (b, a)
            result = paired_interval([share[(first, s)] for s in seeds],
                                     [share[(second, s)] for s in seeds]) if seeds else None
            paper = {m: (reference or {}).get("rows", {}).get(f"{column}/{m}") for m in (a, b)}
            out.append({"task": task, "claim": claim, "a": a, "b": b, "result": result,
                        "a_share": float(np.mean([share[(a, s)] for s in seeds])) if seeds else None,
                        "b_share": float(np.mean([share[(b, s)] for s in seeds])) if seeds else None,
                        **{f"paper_{k}": (float(np.sum([paper[m][i] for i in claim.bins])) / 100 if paper[m]
                                          else None) for k, m in (("a", a), ("b", b))}})
    return out


@dataclass(frozen=True)
class Claim:
    """One tested row of the claims table: the paper's claim, the task, the evidence as printed, the paired result."""

    claim: str
    task: str
    evidence: str
    result: PairedDifference | None


def paired_claims(verifiable: list[Comparison], shifts: list[dict], nonverifiable: list[Comparison],
                  table1_reference: dict) -> list[Claim]:
    """The claims a run's paired results speak to, in the table's order (the Holm family of
    :func:`pipeline_lib.paper.verdicts.verdicts` is the rows with enough seeds)."""
    claims: list[Claim] = []

    def pick(items: list[Comparison], a: str, b: str, metric: str) -> list[Comparison]:
        return [c for c in items if c.a == a and c.b == b and c.metric == metric]

    for a, b, claim in (("grpo_exact", "sft", "RL with the verifier improves on SFT (Table 1)"),
                        ("softmax_exact", "sft", "SoftmaxGRPO-Exact improves on SFT (Table 1)"),
                        ("softmax_exact", "grpo_exact", "SoftmaxGRPO-Exact >= GRPO-Exact (Table 1; "
                         f"{paper_gaps(table1_reference, 'softmax_exact', 'grpo_exact')} points)"),
                        ("softmax_sim", "grpo_sim", "SoftmaxGRPO-Sim > GRPO-Sim (Table 1; "
                         f"{paper_gaps(table1_reference, 'softmax_sim', 'grpo_sim')} points)")):
        for c in pick(verifiable, a, b, "pass@1_greedy"):
            claims.append(Claim(claim, c.task, f"greedy pass@1 {c.result.format(scale=100, with_method=True)} "
                                "points" if c.result else c.note, c.result))
    for shift in shifts:
        r, claim = shift["result"], shift["claim"]
        paper = (f"; paper {_pct(shift.get('paper_b'))} -> {_pct(shift.get('paper_a'))}"
                 if shift.get("paper_a") is not None and shift.get("paper_b") is not None else "")
        first, second = (shift["a"], shift["b"]) if claim.more else (shift["b"], shift["a"])
        claims.append(Claim(claim.statement(shift["a"], shift["b"]) + paper, shift["task"],
                            f"share {_pct(shift['b_share'])} -> {_pct(shift['a_share'])}; {_label(first)} − "
                            f"{_label(second)} {r.format(scale=100, with_method=True)} points" if r else "–", r))
    for c in pick(nonverifiable, "softmax_sim", "grpo_sim", "judge"):
        claims.append(Claim("SoftmaxGRPO-Sim > GRPO-Sim on judged non-verifiable tasks", c.task,
                            f"judge score {c.result.format(scale=100, with_method=True)}" if c.result else c.note,
                            c.result))
    return claims


def _paper_differences(rows: Mapping[str, list], columns: list[str], a: str, b: str) -> str:
    """``+2.1 gsm8k, +9.5 countdown``: the paper's row ``a`` minus row ``b`` per column."""
    return ", ".join(f"{x - y:+.1f} {column}" for column, x, y in zip(columns, rows[a], rows[b], strict=True)
                     if x is not None and y is not None)


def appendix_claims(contents: RunContents, made: Mapping[str, Path], reference: Mapping[str, Any]
                    ) -> list[tuple[str, str | None, str]]:
    """The paper's claims read off a table rather than a paired interval (scale, transfer, the judge's agreement with
    humans, the tau x M sweep), worded as the paper states them: ``(claim, evidence, reason)``, the evidence where
    this run holds what the claim rests on (:class:`~pipeline_lib.paper.contents.RunContents`), else None and the
    reason, from the same contents."""
    out: list[tuple[str, str | None, str]] = []
    scale = reference.get("scale") or {}
    sizes = sorted({key.split("/", 1)[0] for key in scale.get("rows", {})})
    larger = [size for size in sizes if f"{size}/softmax_exact" in scale["rows"]][-1:] if sizes else []
    gaps = (_paper_differences(scale["rows"], scale["columns"], f"{larger[0]}/softmax_exact",
                               f"{larger[0]}/grpo_exact") if larger else "")
    claim = ("The SoftmaxGRPO advantage over GRPO persists at 3B (App. B.2" + (f", paper: {gaps}" if gaps else "")
             + "; two model sizes, not read as a scaling law)")
    if len(contents.models) >= 2 and "scale" in made:
        out.append((claim, f"{len(contents.models)} model sizes in this run ({', '.join(contents.models)}): "
                           f"`{made['scale']}`", ""))
    else:
        out.append((claim, None, f"one base model ({contents.models[0]}) in this run" if contents.models
                    else "no model-scale study in this run"))
    claim = "SoftmaxGRPO-Sim leads on AlpacaEval 2.0, MMLU and GPQA (Table nonverifiable)"
    missing = [name for name in PAPER_TRANSFER if name not in contents.transfer]
    if contents.transfer and "nonverifiable" in made:
        out.append((claim, f"{', '.join(contents.transfer)} in `{made['nonverifiable']}`"
                           + (f"; no {', '.join(missing)} results" if missing else ""), ""))
    else:
        out.append((claim, None, "no transfer benchmark results in this run"))
    judge = reference.get("judge_validation") or {}
    human = judge.get("rows", {}).get("human_judge_correlation")
    paper = (", paper Pearson " + ", ".join(f"{v:.2f} {c}" for c, v in zip(judge["columns"], human, strict=True))
             if human else "")
    claim = f"The primary LLM judge agrees with a blind human rater (App. B, LLM-judge validation{paper})"
    rated = {task: n for task, n in contents.human_rated.items() if n}
    judges = ", ".join(f"{label or 'unnamed'} ({kind})" for label, kind in contents.judges)
    if not contents.judges:
        out.append((claim, None, "no judged task in this run"))
    elif not contents.llm_judged:
        out.append((claim, None, f"judged by {judges}, not an LLM"
                    + ("" if rated else "; no human ratings in this run")))
    elif rated and "judge_validation" in made:
        out.append((claim, f"{sum(rated.values())} rated items compared on {', '.join(sorted(rated))}: "
                           f"`{made['judge_validation']}`", ""))
    else:
        out.append((claim, None, f"no human ratings in this run (judged by {judges})"))
    claim = "tau <= 0.3 gives the best observed accuracy-stability trade-off in the tau x M sweep (Ablations)"
    out.append((claim, f"`{made['ablation']}`", "") if "ablation" in made
               else (claim, None, "no tau x M sweep in this run"))
    return out


def claim_ledger(verifiable: list[Comparison], shifts: list[dict], nonverifiable: list[Comparison],
                 made: dict[str, Path], label: str, table1_reference: dict, min_seeds: int = MIN_SEEDS,
                 contents: RunContents | None = None, reference: Mapping[str, Any] | None = None) -> str:
    """One row per claim of the paper this run speaks to, with the evidence and a verdict, whichever way it falls
    (the rules of :mod:`pipeline_lib.paper.verdicts`, Holm-adjusted over the rows with paired intervals); the
    paper's own differences come from ``table1_reference`` (config/paper_reference.yaml), the claims read off a table
    from ``reference`` (all of it) and what this run holds (``contents``, :func:`appendix_claims`)."""
    claims = paired_claims(verifiable, shifts, nonverifiable, table1_reference)
    rows = [{"Claim": c.claim, "Task": c.task, "Evidence": c.evidence,
             "Seeds": str(c.result.n_seeds) if c.result else "–"} for c in claims]
    results = [c.result for c in claims]
    judged = verdicts(results, min_seeds)
    for row, verdict in zip(rows, judged, strict=True):
        row |= {"Holm-adjusted p": verdict.format_p(), "Verdict": verdict.text}
    for claim, evidence, reason in appendix_claims(contents or RunContents(), made, reference or {}):
        rows.append({"Claim": claim, "Task": "–", "Evidence": evidence or reason, "Seeds": "–",
                     "Holm-adjusted p": "–",
                     "Verdict": "no verdict: compare in its table (no paired interval)" if evidence else "cannot test"})
    table = to_markdown(pd.DataFrame(rows))
    # intervals but none tested: every row is below min_seeds (the Holm family, and so every adjusted p, is empty)
    if any(r is not None and r.has_interval for r in results) and all(np.isnan(v.adjusted_p) for v in judged):
        table = (f"No claim here has the {min_seeds} seeds a verdict needs (`report.min_seeds`): the table gives "
                 "estimates with their intervals and no verdicts. How often verdicts at a given number of seeds "
                 "hold again on fresh seeds is measured by `benchmarks/verdict_stability.py` over runs on more "
                 "seeds" + ("." if label == "paper" else "; CHANGELOG.md records it for the tiny tasks, and "
                            f"docs/miniature.md says why the tiny configuration asks for {min_seeds}.") + "\n\n"
                 + table)
    return table


def build_report(label: str, reference: dict, table1: pd.DataFrame | None, allocation: pd.DataFrame | None,
                 scores: dict | None = None, judge_items: dict | None = None,
                 made: dict[str, Path] | None = None, planted: dict | None = None,
                 machines: pd.DataFrame | None = None, base_runs: dict | None = None, min_seeds: int = MIN_SEEDS,
                 rollouts: Mapping[str, RunId] | None = None, demonstrations: Mapping[str, RunId] | None = None,
                 slips: dict | None = None, contents: RunContents | None = None) -> str:
    """The report's markdown; ``scores``/``judge_items`` are per-prompt scores (see :func:`load_scores`),
    ``made`` the other tables this run made (name -> its markdown file), ``planted`` the tiny tasks' planted design
    (:func:`pipeline_lib.paper.miniature.load_planted`), ``machines`` the machines behind the runs
    (:func:`pipeline_lib.paper.machines.run_machines`), ``base_runs`` the base runs' ``DONE.json`` by run
    (:func:`pipeline_lib.paper.captions.base_done_records`), ``min_seeds`` the seeds a verdict needs,
    ``rollouts`` the paired RL runs' ``rollouts.jsonl`` by file -> run (they split the allocation shift),
    ``demonstrations`` the demonstrations a method generated for itself by file -> run
    (:func:`pipeline_lib.paper.summary.demonstration_quality`), ``slips`` whether each judged
    output carries the planted slip (:func:`pipeline_lib.paper.summary.load_slips`), ``contents`` what the run holds
    (:func:`pipeline_lib.paper.contents.run_contents`: models, transfer benchmarks, judges, human ratings), from which
    every "cannot say" line and untestable claim is derived. A miniature's notice (the run label's paragraph) comes
    before the Summary, so no reader meets a verdict before learning what kind of run made it."""
    comparable = label == "paper"
    contents = contents if contents is not None else RunContents()
    made = made or {}
    tasks = sorted(table1["task"].unique()) if table1 is not None and not table1.empty else []
    quality = demonstration_quality(demonstrations, tasks)
    blind = blind_judges(planted or {}, judge_items, slips)
    artefacts = artefact_notes(quality, blind, allocation)
    rationalization = [a for a in artefacts if a.startswith("Rationalization on")]
    parts = [
        "# Reproduction report",
        "",
        f"Run label: **{label}**. " + ("Numbers are compared with the paper's; Δ = ours − paper (points)."
                                      if comparable else
                                      "This is a miniature run: our numbers sit beside the paper's for orientation "
                                      "only, with no deltas against the paper (different model, data and scale). "
                                      "Within-run differences between methods are paired and carry 95% intervals."),
        "",
        "No number below is copied from the paper into our columns.",
        "",
        INTERVAL_METHOD + " The tables of paired differences are descriptive (each interval at 95% on its own, "
        "no adjustment for their number); verdicts are given only in the claims table, under the rules stated "
        "there, with Holm's family-wise adjustment.",
        "",
    ]
    verifiable: list[Comparison] = []
    if table1 is not None and not table1.empty:
        parts += ["## Table 1 (verifiable accuracy, greedy pass@1 %)", "",
                  table1_section(table1, reference["table1"], comparable, "pass@1_greedy",
                                 {"rationalization": " ".join(rationalization)} if rationalization else None), ""]
        parts += [note, ""] if (note := base_note(base_runs or {})) else []
        if scores:
            for task in sorted(table1["task"].unique()):
                for a, b in VERIFIABLE_PAIRS:
                    for metric in METRICS:
                        comparison = compare(scores, task, a, b, metric)
                        if comparison.result is not None:
                            verifiable.append(comparison)
            parts += ["### Paired differences (a − b, points; 95% t-interval, seed as the unit: see the method above)",
                      "", comparisons_section(verifiable, "") if verifiable else "No paired runs.", ""]
    else:
        parts += ["## Table 1", "", "Not reproduced in this run.", ""]
    per_prompt = {key: {**(scores or {}).get(key, {}), **(judge_items or {}).get(key, {})}
                  for key in {*(scores or {}), *(judge_items or {})}}
    parts += miniature_section(planted or {}, per_prompt,
                               partial(compare, shared_items=True), (*VERIFIABLE_PAIRS, *NONVERIFIABLE_PAIRS),
                               METRICS | {"judge": "judge score"})
    parts += reward_health_section(table1)
    shifts: list[dict] = []
    if allocation is not None and not allocation.empty:
        parts += ["## Gradient allocation (% of sum T_i |A_i|, ours / paper)", "",
                  allocation_section(allocation, reference["gradient_allocation"]), ""]
        if "seed" in allocation.columns:
            shifts = allocation_shift(allocation, reference["gradient_allocation"])
            rows = [{"Task": s["task"], "Range": s["claim"].name, "Paper states": "SoftmaxGRPO-Exact "
                     + ("more" if s["claim"].more else "less"),
                     "GRPO-Exact share": _pct(s["b_share"]), "SoftmaxGRPO-Exact share": _pct(s["a_share"]),
                     "Difference as stated [95% CI] (points)": s["result"].format(scale=100, with_method=True)
                     if s["result"] else "–"}
                    for s in shifts]
            parts += ["### Gradient-allocation shift, paired by seed (the paper's statements)", "",
                      to_markdown(pd.DataFrame(rows)) if rows else "No task here has a statement in the paper.", ""]
            if rollouts is not None and shifts:
                split = allocation_split(rollouts, [(s["task"], s["claim"]) for s in shifts])
                parts += ["### Where the shift comes from", "",
                          "The shift above adds up from two parts, each paired by seed: the estimator's arithmetic "
                          "(GRPO-Exact's own rollouts re-weighted with the softmax run's estimator through the "
                          "advantage registry, against GRPO's weights on them: what the formula alone moves) and "
                          "the change in what training visits (the softmax run's rollouts against GRPO-Exact's, both "
                          "with the softmax weights).", "", split_section(split), ""]
    nonverifiable: list[Comparison] = []
    if judge_items:
        for task in sorted({t for t, _, _ in judge_items}):
            for a, b in NONVERIFIABLE_PAIRS:
                comparison = compare(judge_items, task, a, b, "judge", shared_items=True, conservative=True)
                if comparison.result is not None:
                    nonverifiable.append(comparison)
    sections: dict[str, list[str]] = {}  # our table -> the paper's sections it stands for (one ablation table: two)
    for name, table in OTHER_TABLES.items():
        sections.setdefault(table, []).append(name)
    for table, names in sections.items():
        parts += [f"## {table}" + ("" if names == [table] else f" (the paper's {', '.join(names)})"), ""]
        if table in made:
            parts += [f"Made by this run: `{made[table]}`" + ("" if comparable else
                      " (miniature: the paper's numbers are listed for orientation only)."), ""]
            if made[table].is_file():
                parts += [made[table].read_text().strip(), ""]
            if table == "nonverifiable" and nonverifiable:
                parts += ["Paired differences of the primary judge's score (points of 100; 95% t-interval, seed as "
                          "the unit, over seeds and judged items; an item without a verdict counts at the rubric's "
                          "lowest score for the first method and at its highest for the second):", "",
                          comparisons_section(nonverifiable, "judge score"), ""]
            if table == "nonverifiable" and blind:
                parts += [*(a for a in artefacts if a.startswith("The judge of")), ""]
        else:
            parts += ["Not reproduced in this run (not part of this configuration).", ""]
    parts += ["## Claims", "", rules(min_seeds), "",
              claim_ledger(verifiable, shifts, nonverifiable, made, label, reference["table1"], min_seeds,
                           contents, reference), ""]
    parts += machines_section(machines if machines is not None else pd.DataFrame())
    claims = paired_claims(verifiable, shifts, nonverifiable, reference["table1"])
    judged = verdicts([c.result for c in claims], min_seeds)
    cannot = ([] if comparable or planted else
              [f"the paper's absolute accuracies: this run is labelled `{label}`, not `paper`, so its numbers are not "
               "compared with the paper's"])
    cannot += planted_limits(planted or {}) + cannot_say(contents, bool(judge_items))
    summary = summary_section(label, table1, judge_items,
                              [(c.claim, c.task, c.evidence, v.text) for c, v in zip(claims, judged, strict=True)],
                              [f"{c[0].upper()}{c[1:]}." for c in cannot], artefacts)
    head = 4  # the title and the run label's paragraph (a miniature's notice) come before the Summary
    return "\n".join([*parts[:head], *summary, *parts[head:]])


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _made(pairs: list[str]) -> dict[str, Path]:
    out = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep:
            raise SystemExit(f"--made takes NAME=PATH, got {pair!r}")
        out[name] = Path(path)
    return out


def _test_splits(value: str) -> dict[str, Path]:
    """An argparse ``type``: ``--test-data`` (a JSON file or inline JSON) as task -> its test split, the task a field
    the plan wrote (:func:`pipeline_lib.plan.targets.test_splits`), never read off the split's path."""
    record = json_value(value)
    if not isinstance(record, Mapping) or not all(isinstance(p, str) for p in record.values()):
        raise argparse.ArgumentTypeError(f"--test-data must map each task to its rl_test.parquet, got {record!r}")
    return {task: Path(path) for task, path in record.items()}


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.paper.reproduction", logs=False)
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--table1", type=Path, default=None)
    parser.add_argument("--allocation", type=Path, default=None)
    parser.add_argument("--eval-root", type=Path, default=None,
                        help="results/eval: per-prompt scores (generations.jsonl) of the Table 1 runs")
    parser.add_argument("--rollouts", type=run_ids_argument, default=None,
                        help="JSON (or its file): each paired RL run's rollouts.jsonl -> its run (allocation split)")
    parser.add_argument("--demonstrations", type=run_ids_argument, default={},
                        help="JSON (or its file): each file of demonstrations a method generated for itself -> its run")
    parser.add_argument("--judge-summaries", type=run_ids_argument, default={},
                        help="JSON (or its file): each primary judge summary.json (scores.jsonl beside it) -> its run")
    parser.add_argument("--made", nargs="*", default=[],
                        help="NAME=PATH of the other tables this run made (nonverifiable, ablation, scale, "
                             "judge_validation), PATH their markdown")
    parser.add_argument("--test-data", type=_test_splits, default={},
                        help="JSON (or its file): each tiny task -> its results/data/<task>/rl_test.parquet (their "
                             "planted blind spot; manifest.json beside each: the data spec)")
    parser.add_argument("--scale-data", type=Path, default=None,
                        help="results/paper/data/scale.csv when the run makes the scale table: its base models")
    parser.add_argument("--transfer", type=run_ids_argument, default={},
                        help="JSON (or its file): each transfer result (lm_eval.json / alpaca_eval.json) -> its run")
    parser.add_argument("--agreement", type=Path, nargs="*", default=[],
                        help="each judged task's results/judge/calibration/<task>/agreement.json (human ratings)")
    parser.add_argument("--min-seeds", type=int, default=MIN_SEEDS,
                        help=f"seeds a verdict needs (config report.min_seeds, >= {MIN_SEEDS})")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.time()
    reference = load_yaml(args.reference, "paper reference data")
    table1 = read_csv_frame(args.table1) if args.table1 else None
    allocation = read_csv_frame(args.allocation) if args.allocation else None
    scores = load_scores(table1, args.eval_root) if table1 is not None and args.eval_root else None
    judge_items = load_judge_items(args.judge_summaries) if args.judge_summaries else None
    made = _made(args.made)
    # each run of the Table 1 data (its identity: the CSV's fields) -> its evaluation directory
    evaluations = {run: args.eval_root / run[0] / run[1] / f"seed{run[2]}" for run in scores or {}}
    write_text(args.out, build_report(args.label, reference, table1, allocation, scores, judge_items, made,
                                      planted=load_planted(args.test_data), machines=run_machines(evaluations),
                                      base_runs=base_done_records(evaluations), min_seeds=args.min_seeds,
                                      rollouts=args.rollouts, demonstrations=args.demonstrations,
                                      slips=load_slips(args.judge_summaries, args.test_data),
                                      contents=run_contents(args.scale_data, args.transfer, args.judge_summaries,
                                                            args.agreement)))
    inputs = [p for p in (args.reference, args.table1, args.allocation) if p] + list(args.test_data.values())
    inputs += [*args.judge_summaries, *made.values(), *args.transfer, *args.agreement]
    inputs += [args.scale_data] if args.scale_data else []
    if table1 is not None:  # the demonstrations the summary's well-formed share reads
        inputs += [Path(p) for task in sorted(table1["task"].unique())
                   for p, run in sorted(args.demonstrations.items()) if run.task == task and Path(p).is_file()]
    write_provenance([args.out], step="paper_reproduction_report", inputs=inputs,
                     params={"label": args.label, "min_seeds": args.min_seeds,
                             "runs": runs_record(args.judge_summaries)}, started_at=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
