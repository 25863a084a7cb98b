"""What a run holds, read from its own files, so the reproduction report says only what the run shows.

The report's "what this run cannot say" lines and the claims it cannot test are derived from these contents, never
typed in for one configuration: which base models have results (the scale table's data, ``scale.csv``), which of
the paper's transfer benchmarks have results (the lm-eval / AlpacaEval result files), which judges scored the judged
tasks and of what kind (each primary-judge ``summary.json``), and whether blind human ratings were compared with the
judge (each task's calibration ``agreement.json``). A miniature and the paper plan read the same files; what differs
is what they hold.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

__all__ = ["PAPER_TRANSFER", "RunContents", "cannot_say", "run_contents"]

#: The paper's transfer benchmarks (Table nonverifiable), each with how a result names it: an lm-eval task whose name
#: starts with the prefix, or the AlpacaEval harness.
PAPER_TRANSFER = {"MMLU": "mmlu", "GPQA": "gpqa", "AlpacaEval 2.0": "alpaca_eval"}


@dataclass(frozen=True)
class RunContents:
    """What one run holds (see the module docstring); empty fields mean the run holds none of it."""

    models: tuple[str, ...] = ()  # base models with scale-table results, main scale first
    transfer: tuple[str, ...] = ()  # the paper's transfer benchmarks (keys of PAPER_TRANSFER) with results
    judges: tuple[tuple[str, str], ...] = ()  # (label, kind) of each primary judge that scored a judged task
    human_rated: Mapping[str, int] = field(default_factory=dict)  # judged task -> rated items compared with the judge

    @property
    def llm_judged(self) -> bool:
        return any(kind == "llm" for _, kind in self.judges)


def _transfer_names(results: Iterable[str]) -> tuple[str, ...]:
    found = set()
    for path in results:
        record = json.loads(Path(path).read_text())
        names = ["alpaca_eval"] if record.get("harness") == "alpaca_eval" else list(record.get("results", {}))
        found |= {paper for paper, prefix in PAPER_TRANSFER.items() if any(n.startswith(prefix) for n in names)}
    return tuple(name for name in PAPER_TRANSFER if name in found)


def run_contents(scale_data: Path | None = None, transfer: Iterable[str] = (), judge_summaries: Iterable[str] = (),
                 agreements: Iterable[Path] = ()) -> RunContents:
    """The contents of a run from its files: ``scale_data`` the scale table's data (a ``model`` column),
    ``transfer`` the transfer result files, ``judge_summaries`` the primary judge's ``summary.json`` files,
    ``agreements`` each judged task's calibration ``results/judge/calibration/<task>/agreement.json``."""
    models: tuple[str, ...] = ()
    if scale_data is not None and Path(scale_data).is_file():
        frame = pd.read_csv(scale_data)
        if "model" not in frame.columns:
            raise ValueError(f"{scale_data}: no 'model' column (the scale table's data names each run's base model)")
        models = tuple(str(m) for m in dict.fromkeys(frame["model"].dropna()))
    judges = set()
    for path in judge_summaries:
        judge = json.loads(Path(path).read_text()).get("judge")
        if not isinstance(judge, Mapping) or "kind" not in judge:
            raise ValueError(f"{path}: no judge.kind (the summary names the judge that scored it)")
        judges.add((str(judge.get("label", "")), str(judge["kind"])))
    rated = {}
    for path in agreements:
        record = json.loads(Path(path).read_text())
        compared = int(record.get("items_compared", 0)) if record.get("status") == "rated" else 0
        rated[Path(path).parent.name] = compared
    return RunContents(models, _transfer_names(transfer), tuple(sorted(judges)), rated)


def cannot_say(contents: RunContents, judged: bool) -> list[str]:
    """What this run cannot speak to, one line per gap in its contents (empty when it holds everything the paper's
    appendix claims rest on); ``judged``: the run has judged (non-verifiable) tasks."""
    lines = []
    if len(contents.models) < 2:
        which = f"one base model ({contents.models[0]})" if contents.models else "no model-scale study"
        lines.append(f"whether the SoftmaxGRPO advantage persists at a second model size (App. B.2, 1.5B and 3B): "
                     f"{which} in this run")
    missing = [name for name in PAPER_TRANSFER if name not in contents.transfer]
    if missing:
        lines.append(f"transfer: no {', '.join(missing)} results in this run")
    if judged and contents.judges and not contents.llm_judged:
        names = ", ".join(f"{label or 'unnamed'} ({kind})" for label, kind in contents.judges)
        lines.append(f"the LLM judge's scores: the judged tasks here are scored by {names}, not an LLM")
    if judged and not any(contents.human_rated.values()):
        where = ", ".join(sorted(contents.human_rated)) or "no task calibrated"
        lines.append(f"the judge's agreement with humans: no human ratings compared with it in this run ({where})")
    return lines
