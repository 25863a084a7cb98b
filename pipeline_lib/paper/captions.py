"""Caption facts taken from the run, never typed: what a caption states about the settings must be what ran.

* :func:`ablation_differences`: the settings in which the tau x M ablation's cells differ from the main
  SoftmaxGRPO-Exact runs, from the plan (so from the config), for the ablation table's caption;
* :func:`judge_validation_title`: "LLM-judge validation" only when the judges are LLMs;
* :func:`paper_gaps`: the paper's per-task differences between two Table 1 rows, from config/paper_reference.yaml;
* :func:`base_note`: what this run's Base row is (a pretrained model or the untrained initialisation), from the base
  runs' ``DONE.json`` (the runs whose registry entry is the model before training,
  :attr:`~pipeline_lib.plan.registry.Method.before_training`), for a report that puts it beside the paper's
  pretrained base.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pipeline_lib.paper.machines import RunKey, run_label, training_sidecar
from pipeline_lib.plan.registry import METHODS
from pipeline_lib.plan.runs import Plan

__all__ = ["ablation_differences", "base_done_records", "base_note", "differences_text", "judge_validation_title",
           "paper_gaps"]

#: The main run the ablation's cells vary (an ablation cell trains SoftmaxGRPO-Exact).
ABLATION_REFERENCE = "softmax_exact"
_PAPER_COLUMNS = {"gsm8k": "GSM8K", "countdown": "Countdown", "deepmath": "DeepMath"}


def _flat(spec: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(value, sort_keys=True) if isinstance(value, list) else value
    return out


def _settings(run: Any) -> dict[str, Any]:
    """A run's settings as a caption names them: its trainer settings and its estimator's parameters (tau)."""
    spec = run.spec
    return {**spec.settings, **(spec.estimator.params if spec.estimator is not None else {})}


def ablation_differences(plan: Plan) -> dict[str, list[Any]]:
    """Setting -> [the ablation cells' value, the main runs' value], for every run setting that is the same in all
    cells (the sweep's own settings, tau and M, vary between cells and are left out) and differs from the main
    SoftmaxGRPO-Exact runs of the same task and seed; plus ``seeds`` and ``tasks`` where those differ."""
    cells = [run for run in plan.runs if run.study == "ablation"]
    if not cells:
        return {}
    main = {(run.task, run.seed): run for run in plan.runs if run.study == "main" and run.name == ABLATION_REFERENCE}
    flat_cells = [_flat(_settings(run)) for run in cells]
    constant = {key: flat_cells[0][key] for key in flat_cells[0]
                if all(flat.get(key) == flat_cells[0][key] for flat in flat_cells)}
    out: dict[str, list[Any]] = {}
    for cell in cells:
        reference = main.get((cell.task, cell.seed))
        if reference is None:
            continue
        flat_main = _flat(_settings(reference))
        for key, value in constant.items():
            if key in flat_main and flat_main[key] != value and key not in ("task", "method"):
                out[key] = [value, flat_main[key]]
    main_runs = [run for run in plan.runs if run.study == "main" and run.name == ABLATION_REFERENCE]
    for name, attribute in (("seeds", "seed"), ("tasks", "task")):
        ours = sorted({getattr(run, attribute) for run in cells})
        theirs = sorted({getattr(run, attribute) for run in main_runs})
        if main_runs and ours != theirs:
            out[name] = [ours, theirs]
    return out


def differences_text(differences: Mapping[str, list[Any]]) -> str:
    """``steps 10 (main runs: 20); seeds 0 (main runs: 0, 1, 2)``, or a statement that nothing differs."""
    if not differences:
        return "Every other setting equals the main SoftmaxGRPO-Exact runs'."

    def show(value: Any) -> str:
        return ", ".join(map(str, value)) if isinstance(value, list) else str(value)

    parts = [f"{key} {show(ours)} (main runs: {show(theirs)})" for key, (ours, theirs) in sorted(differences.items())]
    return ("Settings that differ from the main SoftmaxGRPO-Exact runs (from the config): " + "; ".join(parts)
            + ". Every other setting equals theirs.")


def judge_validation_title(kinds: Iterable[str]) -> str:
    """The validation table's name for the judges this run used: the paper's "LLM-judge validation" only for LLMs."""
    kinds = sorted(set(kinds))
    if kinds == ["llm"]:
        return "LLM-judge validation"
    names = " and ".join("LLM" if kind == "llm" else kind for kind in kinds)
    if "llm" in kinds:
        return f"Judge validation ({names} judges)"
    return f"Judge validation ({names} judges; the paper's App. B validates LLM judges, these are not LLMs)"


def paper_gaps(table1_reference: Mapping[str, Any], a: str, b: str) -> str:
    """The paper's ``a`` minus ``b`` per task of its Table 1, e.g. ``paper: +7.0 GSM8K, +3.3 Countdown, +1.2
    DeepMath``."""
    rows, columns = table1_reference["rows"], table1_reference["columns"]
    gaps = [(column, x - y) for column, x, y in zip(columns, rows[a], rows[b], strict=True)
            if x is not None and y is not None]
    return "paper: " + ", ".join(f"{gap:+.1f} {_PAPER_COLUMNS.get(column, column)}" for column, gap in gaps)


def base_note(done_records: Mapping[str, Mapping[str, Any]]) -> str | None:
    """A note for a report whose Base row is not a pretrained model: ``done_records`` maps a base run to its
    ``DONE.json``. None when every base run is pretrained (or there is none)."""
    untrained = sorted(run for run, done in done_records.items() if done.get("pretrained") is False)
    if not untrained:
        return None
    return ("Base here is the untrained, seeded random initialisation that SFT starts from (`DONE.json` of "
            f"{', '.join(untrained)}: `pretrained: false`; a miniature has no pretrained model), not a pretrained "
            "model like the paper's Base (Qwen2.5-1.5B before post-training). Its score is this miniature's floor, "
            "not comparable with the paper's Base row.")


def base_done_records(evaluations: Mapping[RunKey, Path]) -> dict[str, dict[str, Any]]:
    """``<task>/base/seed<k>`` -> its ``DONE.json``, for each run of ``evaluations`` (run -> its evaluation directory)
    whose method is the model before training (Base), found through the evaluation's provenance (the model it read,
    whose sidecar lists the training run's outputs)."""
    out = {}
    for key, eval_dir in evaluations.items():
        registered = METHODS.get(key[1])
        if registered is None or not registered.before_training:
            continue
        run = run_label(key)
        training = training_sidecar(Path(eval_dir))
        done = next((o["path"] for o in (training or {}).get("outputs", []) if o["path"].endswith("DONE.json")), None)
        if done and Path(done).is_file():
            out[run] = json.loads(Path(done).read_text())
    return out
