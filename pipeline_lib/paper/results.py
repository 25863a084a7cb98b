"""Result tables from training and evaluation outputs (compute and render are separate commands). The training curves
are :mod:`pipeline_lib.paper.curves`, so a plot setting there reruns the figure alone.

    python -m pipeline_lib.paper.results table1-data --runs RUNS.json [--selection rl_logit_selection.json] --out CSV
    python -m pipeline_lib.paper.results table1 --data CSV --label tiny --stem results/paper/tables/table1
    python -m pipeline_lib.paper.results allocation-data --runs RUNS.json --out CSV
    python -m pipeline_lib.paper.results allocation --data CSV --label tiny --stem STEM

``--runs`` maps each file the step reads (a run's ``metrics.json``, ``rollouts.jsonl``) to its run's identity as
fields (:class:`pipeline_lib.plan.runs.RunId`; the plan writes it, :func:`pipeline_lib.plan.targets.run_ids_json`):
a run's task, method and seed are read from there, never from the file's path.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline_lib.core.cli import entry_parser, json_value
from pipeline_lib.core.io import read_csv_frame, write_csv_frame
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.core.rl.advantages import group_advantages
from pipeline_lib.core.rl.group_metrics import PASS_RATE_BINS, pass_rate_bin
from pipeline_lib.paper.tables import write_table
from pipeline_lib.paper.variants import read_selection, reported_rows, variant_label
from pipeline_lib.paper.verdicts import BOLD_RULE, MIN_SEEDS, supported_best
from pipeline_lib.plan.registry import METHOD_LABELS, METHOD_ORDER
from pipeline_lib.plan.runs import RunId
from pipeline_lib.plan.targets import run_ids_argument

log = logging.getLogger("pipeline_lib.paper.results")

# Row labels and order come from the method registry (pipeline_lib.plan.registry): one entry per method.


def run_columns(run: RunId) -> dict[str, object]:
    """A run's identity columns in a data frame: its task, method (the run's name) and seed."""
    return {"task": run.task, "method": run.name, "seed": run.seed}


def runs_record(runs: Mapping[str, RunId]) -> dict[str, Any]:
    """What a step's sidecar records of the runs it read: each file's run, as fields."""
    return {path: dataclasses.asdict(run) for path, run in runs.items()}


def _write_csv(frame: pd.DataFrame, path: str | Path) -> None:
    write_csv_frame(frame, path)


def table1_data(runs: Mapping[str, RunId], selections: Sequence[Mapping[str, Any]] = ()) -> pd.DataFrame:
    """One row per reported run: its identity (``run``: its directory), its ``metrics.json`` (``runs``: each
    evaluation's file -> its run); for a method with variants (``selections``: :func:`~pipeline_lib.paper.variants.
    select`'s records), the variant selected on validation as the method's row (``variant``: which)."""
    rows = [{**run_columns(run), "run": run.name, **json.loads(Path(path).read_text())} for path, run in runs.items()]
    frame = pd.DataFrame(rows)
    for selection in selections:
        frame = reported_rows(frame, selection)
    return frame


def _method_sort_key(method: str) -> tuple[int, str]:
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method)


def table1(frame: pd.DataFrame, metric: str, label: str, stem: Path) -> list[Path]:
    """Methods x tasks, mean ± std over seeds (percent); a column's best in bold only where the claims rules
    support it (:func:`pipeline_lib.paper.verdicts.supported_best`), never on a difference no verdict carries."""
    tasks = sorted(frame["task"].unique())
    methods = sorted(frame["method"].unique(), key=_method_sort_key)
    chosen = _selected_variants(frame)
    stats = frame.groupby(["method", "task"])[metric].agg(["mean", "std", "count"])
    per_seed: dict[str, dict[str, dict[int, float]]] = {}
    for row in frame[["task", "method", "seed", metric]].itertuples(index=False):
        per_seed.setdefault(row[0], {}).setdefault(row[1], {})[int(row[2])] = float(row[3])
    best = supported_best(per_seed)
    plain, latex = [], []
    for method in methods:
        name = METHOD_LABELS.get(method, method) + (" (variant selected on validation)" if method in chosen else "")
        row_plain, row_latex = {"Method": name}, {"Method": name}
        for task in tasks:
            if (method, task) not in stats.index:
                row_plain[task] = row_latex[task] = "--"  # the method did not run on this task (as in the paper)
                continue
            mean, std, count = stats.loc[(method, task)]
            spread = f" ± {100 * std:.1f}" if count > 1 and not math.isnan(std) else ""
            cell = f"{100 * mean:.1f}{spread} (n={int(count)})"
            is_best = best.get(task) == method
            variant = chosen.get(method, {}).get(task)
            named = f" [{variant_label(variant)}]" if variant else ""
            row_plain[task] = (f"**{cell}**" if is_best else cell) + named
            row_latex[task] = (rf"\textbf{{{100 * mean:.1f}}}" if is_best else f"{100 * mean:.1f}") + \
                (rf"$\pm${100 * std:.1f}" if spread else "") + named
        plain.append(row_plain)
        latex.append(row_latex)
    caption = (f"Verifiable reasoning accuracy (%), {metric} on held-out prompts, mean ± std over seeds "
               f"[{label} run: not comparable in absolute value with the paper's Table 1]. Sim methods train on the "
               "weak similarity reward, Exact methods on the task verifier; -- = not run on that task; "
               f"{BOLD_RULE.format(min_seeds=MIN_SEEDS)}." + "".join(
                   f" {METHOD_LABELS.get(m, m)}: per task, the reward variant named in brackets, the one with the "
                   f"higher validation {metric} (its last training prompts, held out of every variant's training; the "
                   "paper reports the best variant without saying how it chose); the other variants are in Table "
                   f"{m}_variants." for m in chosen))
    return write_table(pd.DataFrame(plain), stem, caption, "tab:rarl_results", latex_frame=pd.DataFrame(latex),
                       raw_columns=tasks)


#: The ``rollouts.jsonl`` field naming the prompt each rollout answers, by engine: the local engine's training row
#: (``prompt_index``), verl's hash of the decoded prompt text (``prompt_key``: its dumps carry no row index).
PROMPT_FIELDS = ("prompt_index", "prompt_key")
#: What the allocation table says of how a group's pass rate p is measured (its caption and the report's).
PASS_RATE_MEASURE = (
    "A group's p is its prompt's verifier pass rate over the prompt's other visits in the same run (every rollout of "
    "that prompt in its other groups, at other steps; this group left out), so p is measured apart from the group "
    "whose gradient is counted: binned by its own k/M, the [0.9, 1] bin would hold only all-correct groups, whose "
    "advantage is 0 under every estimator. A group whose prompt has no other visit has no such p and is not binned; "
    "'Unbinned' is those groups' share of the whole budget (groups: unbinned / all), never dropped silently.")


#: What the allocation table says of the pass-rate probe, where a run has one (``train.rl.probe_every``).
PROBE_MEASURE = (
    "Where the 'p' column reads 'probe K=k', p is measured by the pass-rate probe instead: the run kept its policy "
    "every probe_every steps, and for groups drawn uniformly per window (eval.probe.groups) the group's prompt was "
    "answered k more times by the policy kept at the start of the group's window (at most probe_every steps before "
    "the visit), scored by the verifier; p = correct / k, apart from the group's own rewards. Such a run's 'Unbinned' "
    "is the groups not drawn for the probe, so its bins are ratio estimates over a simple random sample of groups.")


def _selected_variants(frame: pd.DataFrame) -> dict[str, dict[str, str]]:
    """Method -> task -> the variant its row reports (the ``variant`` column, where a selection filled it)."""
    if "variant" not in frame:
        return {}
    chosen: dict[str, dict[str, str]] = {}
    for row in frame[frame["variant"].notna()][["method", "task", "variant"]].drop_duplicates().itertuples(index=False):
        if chosen.setdefault(row.method, {}).setdefault(row.task, row.variant) != row.variant:
            raise ValueError(f"{row.task}/{row.method}: rows of two variants ({chosen[row.method][row.task]!r}, "
                             f"{row.variant!r}) where Table 1 reports one")
    return chosen


def allocation_data(runs: Mapping[str, RunId], probes: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Per run (``runs``: each run's ``rollouts.jsonl`` -> its run): :func:`allocation_bins`'s totals by pass-rate
    bin, the unbinned budget and the group counts; p by the run's pass-rate probe where ``probes`` (its
    ``rollouts.jsonl`` -> its ``probe.jsonl``) has one, else over each prompt's other visits."""
    probes = probes or {}
    unknown = sorted(set(probes) - set(runs))
    if unknown:
        raise ValueError(f"probes of runs not read here: {unknown}")
    return pd.DataFrame([{**run_columns(run), **allocation_bins(Path(path), probe=Path(probes[path]) if path in
                                                                  probes else None)} for path, run in runs.items()])


def read_probe(path: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """A run's pass-rate probe (:mod:`pipeline_lib.jobs.eval.probe`): the probed groups' keys (step, group index),
    their p, and K."""
    keys, rates, sizes = [], [], set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        try:
            step = np.asarray(record["step"], dtype=np.int64)
            group = np.asarray(record["group"], dtype=np.int64)
            correct = np.asarray(record["correct"], dtype=float)
            samples = int(record["samples"])
        except KeyError as error:
            raise ValueError(f"{path} line {number}: no {error.args[0]!r} field") from None
        if not len(step) == len(group) == len(correct) or samples < 1 or np.any((correct < 0) | (correct > samples)):
            raise ValueError(f"{path} line {number}: fields of different lengths, or counts outside 0..{samples}")
        keys.append(_group_keys(step, group))
        rates.append(correct / samples)
        sizes.add(samples)
    if not keys:
        raise ValueError(f"{path}: no probed groups")
    key = np.concatenate(keys)
    if len(np.unique(key)) != len(key):
        raise ValueError(f"{path}: a group probed twice")
    return key, np.concatenate(rates), sizes.pop() if len(sizes) == 1 else 0


def _group_keys(step: np.ndarray, group: np.ndarray) -> np.ndarray:
    """One integer per (step, group index within the step)."""
    return step.astype(np.int64) * (1 << 32) + group.astype(np.int64)


def _prompt_keys(record: Mapping[str, Any], path: Path, number: int) -> np.ndarray:
    for field in PROMPT_FIELDS:
        if field in record:
            return np.asarray([str(value) for value in record[field]], dtype=object)
    raise ValueError(f"{path} line {number}: no {' or '.join(PROMPT_FIELDS)} field, so the prompt each rollout "
                     "answers is unknown and its pass rate over its other visits cannot be measured (a verl run's "
                     "rollouts.jsonl written before prompt_key existed: rebuild it from the run's rollout_dump)")


def allocation_bins(path: Path, advantage: tuple[str, dict] | None = None, probe: Path | None = None
                    ) -> dict[str, Any]:
    """One run's gradient budget sum_i T_i |A_i| by the pass rate p of each group's prompt, binned by
    :func:`pipeline_lib.core.rl.group_metrics.pass_rate_bin`. p is the run's pass-rate probe where ``probe`` is
    given (:data:`PROBE_MEASURE`: groups not probed are unbinned), else measured over the prompt's other visits in the
    run (leave this group out: :data:`PASS_RATE_MEASURE`).

    Returns ``bin<i>`` totals, ``unbinned`` (the budget of groups with no p), ``groups``, ``groups_unbinned``,
    ``prompts``, ``group_size`` (0 when it varies) and ``measure`` (``probe K=<k>`` or ``other visits``). With
    ``advantage`` (registry name, parameters) the logged advantages are replaced by that estimator's on the same
    rewards (the same rollouts, re-weighted: :func:`pipeline_lib.core.rl.advantages.group_advantages`); p does not
    depend on the weights."""
    import torch

    keys, visits, correct_sums, budgets, group_keys = [], [], [], [], []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        try:
            group = np.asarray(record["group"], dtype=np.int64)
            correct = np.asarray(record["correct"], dtype=float)
            reward = np.asarray(record["reward"], dtype=float)
            length = np.asarray(record["length"], dtype=float)
            logged = None if advantage is not None else np.asarray(record["advantage"], dtype=float)
        except KeyError as error:
            raise ValueError(f"{path} line {number}: no {error.args[0]!r} field") from None
        prompts = _prompt_keys(record, path, number)
        if not len(group) == len(correct) == len(reward) == len(length) == len(prompts):
            raise ValueError(f"{path} line {number}: per-rollout fields of different lengths")
        if advantage is None:
            advantages = logged
        else:
            advantages = group_advantages(advantage[0], torch.from_numpy(reward), torch.from_numpy(group),
                                          **advantage[1]).numpy()
        n_groups = int(group.max()) + 1
        counts = np.bincount(group, minlength=n_groups)
        present = counts > 0
        first = np.zeros(n_groups, dtype=np.int64)
        ids, firsts = np.unique(group, return_index=True)
        first[ids] = firsts  # each group's first rollout
        group_prompt = prompts[first]
        mixed = np.flatnonzero(prompts != group_prompt[group])
        if len(mixed):
            raise ValueError(f"{path} line {number}: group {int(group[mixed[0]])} holds rollouts of more than one "
                             f"prompt ({group_prompt[group[mixed[0]]]!r} and {prompts[mixed[0]]!r})")
        keys.append(group_prompt[present])
        group_keys.append(_group_keys(np.full(int(present.sum()), int(record.get("step", number))),
                                      np.flatnonzero(present)))
        visits.append(counts[present])
        correct_sums.append(np.bincount(group, correct, n_groups)[present])
        budgets.append(np.bincount(group, length * np.abs(advantages), n_groups)[present])
    if not keys:
        raise ValueError(f"{path}: no rollouts")
    key, n, k, budget = (np.concatenate(parts) for parts in (keys, visits, correct_sums, budgets))
    names, prompt = np.unique(key, return_inverse=True)
    if probe is None:
        other_n = np.bincount(prompt, n)[prompt] - n
        other_k = np.bincount(prompt, k)[prompt] - k
        binned = other_n > 0
        rate = other_k[binned] / other_n[binned]
        measure = "other visits"
    else:
        probed, probed_rate, samples = read_probe(probe)
        group_key = np.concatenate(group_keys)
        order = np.argsort(probed)
        at = np.clip(np.searchsorted(probed, group_key, sorter=order), 0, len(probed) - 1)
        binned = probed[order[at]] == group_key
        if int(binned.sum()) != len(probed):
            raise ValueError(f"{probe}: {len(probed) - int(binned.sum())} probed groups are not groups of {path} "
                             "(a probe of another run, or of an earlier training of this one)")
        rate = probed_rate[order[at]][binned]
        measure = f"probe K={samples}" if samples else "probe"
    bins = pass_rate_bin(torch.from_numpy(np.asarray(rate, dtype=float))).numpy()
    totals = np.bincount(bins, budget[binned], len(PASS_RATE_BINS))
    sizes = set(n.tolist())
    return {**{f"bin{i}": float(t) for i, t in enumerate(totals)}, "unbinned": float(budget[~binned].sum()),
            "groups": len(n), "groups_unbinned": int((~binned).sum()), "prompts": len(names),
            "group_size": int(sizes.pop()) if len(sizes) == 1 else 0, "measure": measure}


def bin_names() -> list[str]:
    """Column names of :data:`PASS_RATE_BINS`, as the paper prints them."""
    return [f"[{lo:g},{hi:g})" if i < len(PASS_RATE_BINS) - 1 else f"[{lo:g},{hi:g}]"
            for i, (lo, hi) in enumerate(PASS_RATE_BINS)]


def allocation_table(frame: pd.DataFrame, label: str, stem: Path) -> list[Path]:
    """Table 3: per task and method, summed over seeds, each bin's share of the binned budget (a row's five bins sum
    to 100%) and the unbinned share of the whole budget beside them."""
    bins = [f"bin{i}" for i in range(len(PASS_RATE_BINS))]
    missing = sorted({*bins, "unbinned", "groups", "groups_unbinned"} - set(frame.columns))
    if missing:
        raise ValueError(f"allocation data lacks columns {missing} (made before p was measured over other visits: "
                         "rerun paper_gradient_allocation_data)")
    if "measure" not in frame:
        frame = frame.assign(measure="other visits")
    summed = frame.groupby(["task", "method"])[[*bins, "unbinned", "groups", "groups_unbinned"]].sum()
    measures = frame.groupby(["task", "method"])["measure"].agg(lambda values: ", ".join(sorted(set(values))))
    rows = []
    for (task, method), values in summed.iterrows():
        total = values[bins].sum()
        whole = total + values["unbinned"]
        cells = {name: (f"{100 * values[b] / total:.1f}%" if total > 0 else "no signal")
                 for name, b in zip(bin_names(), bins, strict=True)}
        rows.append({"Task": task, "Method": METHOD_LABELS.get(method, method), **cells,
                     "Unbinned": (f"{100 * values['unbinned'] / whole:.1f}%" if whole > 0 else "no signal")
                     + f" ({int(values['groups_unbinned'])}/{int(values['groups'])} groups)",
                     "p": measures[task, method]})
    caption = (f"Gradient allocation across prompt difficulty [{label} run]: fraction of the total token-level "
               "gradient budget sum_i T_i |A_i| spent on prompts binned by their measured pass rate p, summed over "
               "all training steps and seeds; the five bins of each row sum to 100% of the binned budget. "
               + PASS_RATE_MEASURE + " " + PROBE_MEASURE)
    return write_table(pd.DataFrame(rows), stem, caption, "tab:gradient_allocation")


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.paper.results")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("table1-data")
    p.add_argument("--runs", type=run_ids_argument, required=True,
                   help="JSON (or its file): each metrics.json -> its run")
    p.add_argument("--selection", type=Path, action="append", default=[],
                   help="a method's variant selection (pipeline_lib.paper.variants select): its row is the selected "
                        "variant's")
    p.add_argument("--out", required=True)
    p = sub.add_parser("table1")
    p.add_argument("--data", required=True)
    p.add_argument("--metric", default="pass@1_greedy")
    p.add_argument("--label", required=True)
    p.add_argument("--stem", type=Path, required=True)
    p = sub.add_parser("allocation-data")
    p.add_argument("--probes", type=json_value, default={},
                   help="JSON (or its file): a run's rollouts.jsonl -> its pass-rate probe's probe.jsonl")
    p.add_argument("--runs", type=run_ids_argument, required=True,
                   help="JSON (or its file): each rollouts.jsonl -> its run")
    p.add_argument("--out", required=True)
    p = sub.add_parser("allocation")
    p.add_argument("--data", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--stem", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.time()
    if args.command == "table1-data":
        _write_csv(table1_data(args.runs, [read_selection(path) for path in args.selection]), args.out)
        write_provenance([args.out], step="paper_table1_data", inputs=[*args.runs, *args.selection],
                         params={"runs": runs_record(args.runs)}, started_at=started)
    elif args.command == "table1":
        paths = table1(read_csv_frame(args.data), args.metric, args.label, args.stem)
        write_provenance(paths, step="paper_table1", inputs=[args.data], params={"metric": args.metric},
                         started_at=started)
    elif args.command == "allocation-data":
        _write_csv(allocation_data(args.runs, args.probes), args.out)
        write_provenance([args.out], step="paper_gradient_allocation_data",
                         inputs=[*args.runs, *args.probes.values()],
                         params={"runs": runs_record(args.runs), "probes": args.probes}, started_at=started)
    else:
        paths = allocation_table(read_csv_frame(args.data), args.label, args.stem)
        write_provenance(paths, step="paper_gradient_allocation", inputs=[args.data], started_at=started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
