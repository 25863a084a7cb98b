"""The reproduction report's "which machine made these numbers": read from the provenance sidecars of its runs.

Every step records its machine in its sidecar (:func:`pipeline_lib.core.provenance.hardware` and
:func:`~pipeline_lib.core.provenance.numerics`: CPU model and count, torch version, threads, the CPU kernels torch
dispatches to, determinism switches). The same code and seeds give bit-identical results on one machine and different
ones on another, so a score is only comparable with another machine's as a different draw; the report names the
machines behind its numbers and says so. An evaluation's sidecar names the model it read, whose sidecar is the
training run's: both are followed from the evaluation directory, no path re-typed. A run is named by its identity
(task, name, seed: the fields the report's data carry), never by parsing its directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline_lib.core.provenance import SIDECAR_SUFFIX
from pipeline_lib.paper.tables import to_markdown

__all__ = ["MACHINE_NOTE", "RunKey", "machine_of", "machines_section", "run_label", "run_machines", "training_sidecar"]

#: A run as the report's data name it: (task, run name, seed).
RunKey = tuple[str, str, int]

#: What every report says about machines, whichever machines made it.
MACHINE_NOTE = (
    "The same code and seeds give bit-identical results on one machine and different ones on another: the CPU "
    "kernels torch picks and its thread count can change the order of floating-point sums, which changes sampled "
    "tokens and so whole training trajectories. Absolute scores here are this machine's draw; a run on another "
    "machine (or with other threads) is a different draw, comparable only within the spread the seeds show. Paired "
    "differences compare runs made on the machines in the table above."
)

_UNKNOWN = "not recorded"


def machine_of(sidecar: dict[str, Any]) -> dict[str, Any]:
    """The machine fields of one sidecar (older sidecars without the numerics record say so)."""
    host = sidecar.get("host") or {}
    torch = (host.get("numerics") or {}).get("torch") or {}
    return {"CPU": f"{host.get('cpu_model', _UNKNOWN)} ({host.get('cpu_count', '?')} cores)",
            "host": host.get("hostname", _UNKNOWN),
            "torch": torch.get("version") or (sidecar.get("software") or {}).get("torch") or _UNKNOWN,
            "CPU kernels": torch.get("cpu_capability", _UNKNOWN),
            "threads": torch.get("num_threads", _UNKNOWN),
            "deterministic algorithms": torch.get("deterministic_algorithms", _UNKNOWN)}


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not a provenance sidecar ({error})") from None


def _model_sidecar(evaluation: dict[str, Any]) -> dict[str, Any] | None:
    """The sidecar of the model an evaluation read (its ``config.json`` input): the training run's record."""
    model = next((i for i in evaluation.get("inputs", []) if i["path"].endswith("config.json")), None)
    return _read(Path(model["provenance"])) if model else None


def training_sidecar(eval_dir: Path) -> dict[str, Any] | None:
    """The training run's sidecar behind the evaluation in ``eval_dir`` (None where a sidecar is missing)."""
    evaluation = _read(Path(eval_dir) / f"metrics.json{SIDECAR_SUFFIX}")
    return _model_sidecar(evaluation) if evaluation else None


def run_label(run: RunKey) -> str:
    """``<task>/<name>/seed<k>``: how the report names a run."""
    task, name, seed = run
    return f"{task}/{name}/seed{seed}"


def run_machines(evaluations: Mapping[RunKey, Path]) -> pd.DataFrame:
    """One row per step behind the report's per-prompt scores (``evaluations``: each run -> its evaluation
    directory): each evaluation (``<dir>/metrics.json``'s sidecar) and the training run of the model it evaluated
    (the sidecar its model input names)."""
    rows = []
    for key, eval_dir in evaluations.items():
        run = run_label(key)
        evaluation = _read(Path(eval_dir) / f"metrics.json{SIDECAR_SUFFIX}")
        if evaluation is None:
            rows.append({"run": run, "step": "evaluation", "CPU": "no provenance sidecar"})
            continue
        rows.append({"run": run, "step": "evaluation", **machine_of(evaluation)})
        training = _model_sidecar(evaluation)
        rows.append({"run": run, "step": "training",
                     **(machine_of(training) if training else {"CPU": "no provenance sidecar"})})
    return pd.DataFrame(rows)


def machines_section(machines: pd.DataFrame) -> list[str]:
    """The report's machine section: each machine (CPU, host, torch, CPU kernels) with the thread counts and
    determinism settings its steps ran with and how many training runs and evaluations it made, and
    :data:`MACHINE_NOTE`."""
    if machines.empty:
        return []
    keys = [c for c in ("CPU", "host", "torch", "CPU kernels") if c in machines.columns]
    settings = [c for c in ("threads", "deterministic algorithms") if c in machines.columns]
    frame = machines.fillna(_UNKNOWN).astype({k: str for k in keys + settings})
    rows = []
    for machine, steps in frame.groupby(keys, sort=True):
        rows.append({**dict(zip(keys, machine, strict=True)),
                     **{c: ", ".join(sorted(steps[c].unique())) for c in settings},
                     "training runs": int((steps["step"] == "training").sum()),
                     "evaluations": int((steps["step"] == "evaluation").sum())})
    parts = ["## Machines behind these numbers", "",
             "Read from the provenance sidecars of the Table 1 runs (training and evaluation); each sidecar also "
             "records the seeds, the software versions and the thread and determinism settings of its step.", "",
             to_markdown(pd.DataFrame(rows)), "", MACHINE_NOTE, ""]
    if len(rows) > 1:
        parts += [f"This report mixes {len(rows)} machines: a difference between runs made on different ones carries "
                  "the machine's effect as well as the method's.", ""]
    return parts
