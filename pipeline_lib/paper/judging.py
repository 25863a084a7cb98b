"""The judge-based tables: non-verifiable results (paper Table "nonverifiable") and judge validation.

    python -m pipeline_lib.paper.judging nonverifiable --summaries RUNS.json --transfer RUNS.json
        --methods sft grpo_sim softmax_sim --label tiny --stem results/paper/tables/nonverifiable
    python -m pipeline_lib.paper.judging validation --cross results/judge/cross/{task}.json
        --agreement results/judge/calibration/{task}/agreement.json --ours softmax_sim --label tiny --stem STEM

Every cell names its judge in the caption (a programmatic judge is never passed off as an LLM
judge), and a missing human rating is written as "no ratings yet", never as a number. ``--summaries`` and
``--transfer`` map each primary-judge ``summary.json`` / transfer result to its run
(:class:`pipeline_lib.plan.runs.RunId`, written by the plan): a run's task, method and seed are read from there.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline_lib.core.cli import entry_parser, json_value
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.jobs.judge.score import reported_score
from pipeline_lib.paper.captions import judge_validation_title
from pipeline_lib.paper.results import run_ids_argument, runs_record
from pipeline_lib.paper.tables import latex_escape, write_table
from pipeline_lib.paper.verdicts import BOLD_RULE, MIN_SEEDS, supported_best
from pipeline_lib.plan.registry import METHOD_LABELS
from pipeline_lib.plan.runs import RunId

__all__ = ["nonverifiable_table", "pairwise_column", "validation_table"]

NONVERIFIABLE_LABELS = METHOD_LABELS  # the registry's row labels


def _judge_label(summaries: list[dict[str, Any]], labels: Mapping[str, str] | None = None) -> str:
    """The judges' display names: the config's (``labels``, by judge) over those recorded when the items were scored,
    so relabelling a judge redraws the tables without rescoring."""
    labels = sorted({f"{(labels or {}).get('primary', s['judge']['label'])} ({s['judge']['kind']})" for s in summaries})
    return "; ".join(labels)


def transfer_scores(results: Mapping[str, RunId]) -> dict[tuple[str, str], list[float]]:
    """(method, column) -> values over seeds from lm-eval (accuracy, %) and AlpacaEval (LC win rate) results
    (``results``: each result file -> its run)."""
    scores: dict[tuple[str, str], list[float]] = defaultdict(list)
    for path, run in results.items():
        method = run.name
        result = json.loads(Path(path).read_text())
        if result["harness"] == "alpaca_eval":
            scores[(method, "AlpacaEval 2.0 (LC)")].append(result["results"]["length_controlled_winrate"])
            continue
        for task, metrics in result["results"].items():
            metric = "acc,none" if "acc,none" in metrics else sorted(k for k in metrics if k.startswith("acc"))[0]
            scores[(method, task)].append(100 * metrics[metric])
    return scores


def pairwise_column(task: str) -> str:
    """The column of a task's score against its expert reference (beside the task's isolated score)."""
    return f"{task} (pairwise vs reference, win %)"


def nonverifiable_table(summaries_by_run: Mapping[str, RunId], methods: list[str], label: str, stem: Path,
                        transfer: Mapping[str, RunId] | None = None, judge_labels: Mapping[str, str] | None = None,
                        pairwise: Mapping[str, RunId] | None = None) -> list[Path]:
    """Methods x judged tasks (+ transfer benchmarks): mean ± std over seeds; bold only where supported.
    ``summaries_by_run``, ``pairwise`` and ``transfer``: each primary-judge summary (isolated, against the expert
    reference) / transfer result -> its run.

    Judged columns are the primary judge's 0-100 score and, for a task judged pairwise (the paper's Poetry), beside
    it its win rate against the expert reference (both orders judged; a tie counts half); transfer columns are
    lm-eval accuracy (%) and AlpacaEval 2.0's length-controlled win rate.
    """
    scores: dict[tuple[str, str], list[float]] = defaultdict(list)
    failed: dict[str, int] = defaultdict(int)
    refused: dict[str, int] = defaultdict(int)
    per_seed: dict[str, dict[str, dict[int, float]]] = {}  # column -> method -> seed -> score
    summaries = []
    for compared, files in ((False, summaries_by_run), (True, pairwise or {})):
        for path, run in files.items():
            summary = json.loads(Path(path).read_text())
            column = pairwise_column(run.task) if compared else run.task
            summaries.append(summary)
            failed[column] += summary["failed"]
            refused[column] += summary.get("refused", 0)
            reported = reported_score(summary, path)  # items without a verdict at the scale's lowest score
            if reported is not None:
                scores[(run.name, column)].append(reported)
                per_seed.setdefault(column, {}).setdefault(run.name, {})[run.seed] = reported
    tasks = sorted({task for _, task in scores})
    judged = list(tasks)
    transferred = transfer_scores(transfer or {})
    scores |= transferred
    tasks += sorted({column for _, column in transferred})
    best = supported_best(per_seed)  # transfer scores carry no seed: never marked
    plain, latex = [], []
    for method in methods:
        name = NONVERIFIABLE_LABELS.get(method, method)
        row_plain, row_latex = {"Method": name}, {"Method": latex_escape(name)}
        for task in tasks:
            values = scores.get((method, task))
            if not values:
                row_plain[task] = row_latex[task] = "--"
                continue
            mean = statistics.fmean(values)
            std = statistics.stdev(values) if len(values) > 1 else math.nan
            spread = f" ± {std:.1f}" if not math.isnan(std) else ""
            bold = best.get(task) == method
            cell = f"{mean:.1f}{spread} (n={len(values)})"
            row_plain[task] = f"**{cell}**" if bold else cell
            row_latex[task] = (rf"\textbf{{{mean:.1f}}}" if bold else f"{mean:.1f}") + \
                (rf"$\pm${std:.1f}" if spread else "")
        plain.append(row_plain)
        latex.append(row_latex)
    failures = ", ".join(f"{task}: {refused[task]} refused, {failed[task]} failed" for task in judged)
    pairwise_note = ("; a 'pairwise vs reference' column is the same judge's win rate (%) of the output against the "
                     "task's expert reference with the paper's rubric for two poems, each item judged in both orders "
                     "(a tie counts half; an item without a verdict counts as a loss)") if pairwise else ""
    caption = (f"Non-verifiable task results: judge score on the paper's 0-100 scale (mean rubric score x 10)"
               f"{pairwise_note}; "
               f"transfer columns, when present, are lm-eval accuracy (%) and AlpacaEval 2.0 LC win rate; "
               f"mean ± std over seeds; {BOLD_RULE.format(min_seeds=MIN_SEEDS)}. Judge: "
               f"{_judge_label(summaries, judge_labels)}. "
               f"Items without a verdict (refused: the judged output held the judge's verdict; failed: no usable "
               f"answer) count at the rubric's lowest score, the conservative end (each summary.json gives the "
               f"score with them at the highest too): {failures}. "
               f"[{label} run: not comparable in absolute value with the paper's table.]")
    return write_table(pd.DataFrame(plain), stem, caption, "tab:nonverifiable", latex_frame=pd.DataFrame(latex),
                       raw_columns=tasks)


def _fmt(value: float | None, digits: int, note: str | None = None) -> str:
    if value is None:
        return note or "undefined"
    return f"{value:.{digits}f}"


def _pairwise_rows(cross: dict[str, Any] | None, agreement: dict[str, Any], ours: str, where: Path
                   ) -> dict[str, str]:
    """A task's validation rows of its scores against the expert reference ("--" for a task judged in isolation)."""
    names = ("Pairwise vs reference: primary judge win %", "Pairwise vs reference: second judge win %",
             "Pairwise vs reference: cross-judge rank correlation (Spearman, method means)",
             "Pairwise vs reference: human-judge correlation (Spearman)")
    if cross is None:
        return dict.fromkeys(names, "--")
    row = next((r for r in cross["methods"] if r["method"] == ours), None)
    if row is None:
        raise ValueError(f"{where}: method {ours!r} was not judged pairwise")
    rated = agreement.get("pairwise", {})
    human = (_fmt(rated.get("spearman"), 2, rated.get("note")) if rated.get("status") == "rated"
             else "no ratings yet")
    return dict(zip(names, (f"{row['primary']:.1f}", f"{row['second']:.1f}",
                            _fmt(cross["spearman_methods"], 3, cross["spearman_methods_note"]), human), strict=True))


def validation_table(cross_paths: list[Path], agreement_paths: list[Path], ours: str, label: str, stem: Path,
                     judge_labels: Mapping[str, str] | None = None, pairwise_cross: list[Path] | None = None
                     ) -> list[Path]:
    """The paper's judge-validation rows per task, computed from the cross-judge and calibration outputs; for a task
    also judged against its expert reference (``pairwise_cross``: its cross-judge file, named by the task), the same
    rows of those scores."""
    pairwise = {path.stem: json.loads(path.read_text()) for path in pairwise_cross or []}
    columns: dict[str, dict[str, str]] = {}
    judges, kinds = set(), set()
    for cross_path, agreement_path in zip(cross_paths, agreement_paths, strict=True):
        task = cross_path.stem
        cross = json.loads(cross_path.read_text())
        agreement = json.loads(agreement_path.read_text())
        judges |= {f"{name} = {(judge_labels or {}).get(name, cross[f'{name}_judge']['label'])} "
                   f"({cross[f'{name}_judge']['kind']})" for name in ("primary", "second")}
        kinds |= {cross["primary_judge"]["kind"], cross["second_judge"]["kind"]}
        row = next((r for r in cross["methods"] if r["method"] == ours), None)
        if row is None:
            raise ValueError(f"{cross_path}: method {ours!r} was not judged")
        if agreement["status"] == "rated":
            human_pearson = _fmt(agreement.get("pearson"), 2, agreement.get("note"))
            human_spearman = _fmt(agreement.get("spearman"), 2, agreement.get("note"))
            rated = f"{agreement['items_compared']} of {agreement['items_in_sample']}"
        else:
            human_pearson = human_spearman = "no ratings yet"
            rated = f"0 of {agreement['items_in_sample']}"
        columns[task] = {
            f"Primary judge score ({NONVERIFIABLE_LABELS.get(ours, ours)})": f"{row['primary']:.1f}",
            "Second judge score": f"{row['second']:.1f}",
            "Cross-judge rank correlation (Spearman, method means)":
                _fmt(cross["spearman_methods"], 3, cross["spearman_methods_note"]),
            "Cross-judge item-level Spearman": _fmt(cross["spearman_items"], 3, cross["spearman_items_note"]),
            "Score offset (primary - second)": f"{cross['offset_mean']:+.1f}",
            "Human-judge correlation (Pearson)": human_pearson,
            "Human-judge correlation (Spearman)": human_spearman,
            "Blind items rated": rated,
        }
        if pairwise:
            columns[task] |= _pairwise_rows(pairwise.get(task), agreement, ours, cross_path)
    evaluations = list(next(iter(columns.values())))
    frame = pd.DataFrame([{"Evaluation": e, **{task: columns[task][e] for task in columns}} for e in evaluations])
    caption = (f"{judge_validation_title(kinds)} on the 0-100 scale: {'; '.join(sorted(judges))}. Rank correlation "
               "compares method-level orderings across the two judges; human-judge correlation compares blind human "
               "ratings with the primary judge"
               + ("; the pairwise rows are the same for the win rate against the expert reference (the human rates "
                  "each output in isolation)" if pairwise else "") + f". [{label} run.]")
    return write_table(frame, stem, caption, "tab:judge_validation")


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, summary="line", logs=False)
    sub = parser.add_subparsers(dest="command", required=True)
    table = sub.add_parser("nonverifiable")
    table.add_argument("--summaries", type=run_ids_argument, required=True,
                       help="JSON (or its file): each primary-judge summary.json -> its run")
    table.add_argument("--methods", nargs="+", required=True)
    table.add_argument("--transfer", type=run_ids_argument, default={},
                       help="JSON (or its file): each lm_eval.json / alpaca_eval.json -> its run")
    table.add_argument("--pairwise", type=run_ids_argument, default={},
                       help="JSON (or its file): each primary-judge pairwise summary.json (against the expert "
                            "reference) -> its run")
    table.add_argument("--label", required=True)
    table.add_argument("--judge-labels", type=json_value, default=None,
                       help='JSON file or inline JSON: {"primary": ..., "second": ...}')
    table.add_argument("--stem", type=Path, required=True)
    validation = sub.add_parser("validation")
    validation.add_argument("--cross", type=Path, nargs="+", required=True)
    validation.add_argument("--agreement", type=Path, nargs="+", required=True)
    validation.add_argument("--cross-pairwise", type=Path, nargs="*", default=[],
                            help="cross-judge files of the pairwise scores (results/judge/cross/pairwise/<task>.json)")
    validation.add_argument("--ours", required=True)
    validation.add_argument("--label", required=True)
    validation.add_argument("--judge-labels", type=json_value, default=None,
                            help='JSON file or inline JSON: {"primary": ..., "second": ...}')
    validation.add_argument("--stem", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "nonverifiable":
        outputs = nonverifiable_table(args.summaries, args.methods, args.label, args.stem, args.transfer,
                                      args.judge_labels, args.pairwise)
        write_provenance(outputs, step="paper_nonverifiable", inputs=[*args.summaries, *args.pairwise, *args.transfer],
                         params={"methods": args.methods, "label": args.label,
                                 "runs": runs_record({**args.summaries, **args.pairwise, **args.transfer})})
    else:
        outputs = validation_table(args.cross, args.agreement, args.ours, args.label, args.stem, args.judge_labels,
                                   args.cross_pairwise)
        write_provenance(outputs, step="paper_judge_validation",
                         inputs=[*args.cross, *args.cross_pairwise, *args.agreement],
                         params={"ours": args.ours, "label": args.label})
    print("\n".join(map(str, outputs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
