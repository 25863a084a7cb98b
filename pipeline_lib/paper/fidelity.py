"""The fidelity ledger ``docs/fidelity.md``, generated from the paper plan: ``python -m pipeline_lib fidelity``.

Each table, figure and quoted number of the paper beside the Snakemake target that produces it, and each setting of
the paper's runs beside the paper's value and the authors' value, with every difference and its reason. The paper's
and the authors' values, with their sources, are in one data file (``pipeline_lib/plan/fidelity_reference.yaml``);
what the paper plan runs is read from the plan (:func:`pipeline_lib.plan.plan_runs` on the resolved
``config/paper.yaml``: the run spec of each task's SoftmaxGRPO run), from the resolved config or from a constant of
the engine code, never restated. ``--check`` writes nothing and exits 1 when the ledger is stale or a difference has
no reason; ``tests/paper/test_fidelity.py`` runs the same checks.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.io import write_text
from pipeline_lib.core.schema_docs import resolved_configs
from pipeline_lib.core.yaml_files import load_yaml
from pipeline_lib.plan import RunSpec, plan_runs
from pipeline_lib.plan.targets import stage_targets

__all__ = ["COMMAND", "LEDGER", "REFERENCE", "Row", "ledger_rows", "ledger_text", "main", "missing_reasons"]

REPO = Path(__file__).resolve().parents[2]
REFERENCE = Path("pipeline_lib/plan/fidelity_reference.yaml")
LEDGER = Path("docs/fidelity.md")
COMMAND = "python -m pipeline_lib fidelity"
#: Each task's run the settings are read from: the first of these methods the paper plan trains on the task.
REPRESENTATIVE = ("softmax_exact", "softmax_sim")
_ABSENT = object()


@dataclass(frozen=True)
class Row:
    """One setting on a set of tasks: ours (from the plan), the paper's and the authors' values, and the reason
    where ours differs from either."""

    setting: str
    tasks: tuple[str, ...]
    ours: Any
    ours_from: str
    paper: Any
    paper_source: str
    authors: Any
    authors_source: str
    reason: str | None

    @property
    def differs(self) -> list[str]:
        """Whose stated value ours differs from (``paper``, ``authors``)."""
        return [who for who, value in (("paper", self.paper), ("authors", self.authors))
                if value is not None and not _same(self.ours, value)]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def _path(value: Any, path: str, where: str) -> Any:
    for key in path.split("."):
        value = value.get(key, _ABSENT) if isinstance(value, Mapping) else getattr(value, key, _ABSENT)
        if value is _ABSENT:
            raise KeyError(f"{REFERENCE}: {where}: no {path!r} (stop at {key!r}); update the reference file")
    return value


def _override(spec: RunSpec, key: str, default: Any = None) -> Any:
    """The value the run's verl overrides give ``key`` (YAML-parsed), or ``default`` (verl's own) when none does."""
    for item in spec.extra_overrides or ():
        name, _, value = item.partition("=")
        if name.lstrip("+") == key:
            parsed = yaml.safe_load(value) if value else None
            if isinstance(parsed, str):  # YAML 1.1 reads 1.0e9 as a string; Hydra reads it as a float
                with contextlib.suppress(ValueError):
                    parsed = float(parsed)
            return parsed
    return default


def _ours(how: Mapping[str, Any], spec: RunSpec, config: Mapping[str, Any], task: str, where: str) -> tuple[Any, str]:
    """The paper plan's value of one setting on ``task`` and where it was read."""
    if "spec" in how:
        paths = how["spec"] if isinstance(how["spec"], list) else [how["spec"]]
        values = [_path(spec, p, where) for p in paths]
        return (values if len(values) > 1 else values[0]), "run spec " + " / ".join(f"`{p}`" for p in paths)
    if "override" in how:
        return _override(spec, how["override"], how.get("default")), f"verl override `{how['override']}`"
    if "config" in how:
        key = how["config"].format(task=task)
        return _path(config, key, where), f"config `{key}`"
    if "function" in how:  # a plan function of (config, task): a value the plan derives, e.g. a per-task default
        module, _, name = how["function"].partition(":")
        return getattr(importlib.import_module(module), name)(config, task), f"`{module}.{name}(config, task)`"
    if "code" in how:
        module, _, name = how["code"].partition(":")
        return getattr(importlib.import_module(module), name), f"`{module}.{name}`"
    raise ValueError(f"{REFERENCE}: {where}: 'ours' names none of spec, override, config, function, code")


def _stated(entry: Mapping[str, Any] | None, task: str) -> Any:
    """A reference value for ``task``: a per-task mapping's entry, or the one value for every task."""
    value = (entry or {}).get("value")
    return value.get(task) if isinstance(value, Mapping) else value


def _specs(config: Mapping[str, Any], tasks: Sequence[str]) -> dict[str, RunSpec]:
    """Each task's representative run spec from the paper plan (its main study; the transfer study's for a task only
    it trains), the lowest seed."""
    runs = sorted(plan_runs(config).runs, key=lambda run: run.seed)
    out = {}
    for task in tasks:
        for method in REPRESENTATIVE:
            run = next((r for r in runs if r.task == task and r.name == method and r.study in ("main", "transfer")),
                       None)
            if run is not None:
                out[task] = run.spec
                break
    return out


def ledger_rows(repo: Path = REPO) -> tuple[list[Row], list[dict[str, Any]]]:
    """The settings rows (tasks with the same values merged) and the outputs with whether the paper plan makes
    each target."""
    reference = load_yaml(repo / REFERENCE, "fidelity reference")
    config = resolved_configs(repo)["paper"]
    specs = _specs(config, reference["tasks"])
    targets = set(stage_targets(config)["all"])
    outputs = [{**item, "planned": item["target"] in targets} for item in reference["outputs"]]
    rows: list[Row] = []
    for entry in reference["settings"]:
        merged: dict[str, Row] = {}
        for task in entry.get("tasks", reference["tasks"]):
            where = f"setting {entry['name']!r}, task {task}"
            if task not in specs:
                raise KeyError(f"{where}: the paper plan trains no {' or '.join(REPRESENTATIVE)} on {task}")
            ours, ours_from = _ours(entry["ours"], specs[task], config, task, where)
            paper, authors = _stated(entry.get("paper"), task), _stated(entry.get("authors"), task)
            reason = (entry.get("reasons") or {}).get(task, entry.get("reason"))
            row = Row(entry["name"], (task,), ours, ours_from, paper, (entry.get("paper") or {}).get("source", ""),
                      authors, (entry.get("authors") or {}).get("source", ""), reason)
            key = json.dumps([ours, paper, authors, reason if row.differs else None], default=str)
            if key in merged:
                old = merged[key]
                merged[key] = Row(**{**old.__dict__, "tasks": (*old.tasks, task)})
            else:
                merged[key] = row
        rows += list(merged.values())
    return rows, outputs


def missing_reasons(rows: Sequence[Row], outputs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each difference without a reason, and each output the paper plan does not make without one."""
    out = [f"{row.setting} ({', '.join(row.tasks)}): ours {_show(row.ours)} differs from the "
           f"{' and '.join(row.differs)} value with no reason in {REFERENCE}" for row in rows
           if row.differs and not row.reason]
    out += [f"{item['item']}: {item['target']} is not a target of the paper plan and has no reason"
            for item in outputs if not item["planned"] and not item.get("reason")]
    return out


def _show(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def ledger_text(repo: Path = REPO) -> str:
    """The ledger's markdown (what ``python -m pipeline_lib fidelity`` writes)."""
    rows, outputs = ledger_rows(repo)
    reference = load_yaml(repo / REFERENCE, "fidelity reference")
    differing = [row for row in rows if row.differs]
    lines = [
        "# Fidelity ledger: the paper plan beside the paper and the authors' code", "",
        f"<!-- generated by `{COMMAND}` from the paper plan and {REFERENCE}: edit those, not this file -->", "",
        "What `config/paper.yaml` runs, read from the plan (each task's SoftmaxGRPO run spec, the resolved config, "
        "the engine's constants), beside the paper's value (its LaTeX source, App. B unless a row says otherwise) "
        "and the authors' (`jeffhernandez1995/softmaxgrpo` at "
        f"`{str(reference.get('authors_commit', ''))[:7]}`: `softmaxgrpo/configs/base.yaml` merged with the task's "
        f"file). The reference values and their sources are in `{REFERENCE}`; `–` is a value the source does not "
        f"state. `{COMMAND} --check` (and `tests/paper/test_fidelity.py`) fails when this file is stale or a "
        "difference has no reason.", "",
        "## Tables, figures and quoted numbers", "",
        "| paper | where | target | in the paper plan |", "|---|---|---|---|",
        *(f"| {_cell(item['item'])} | {_cell(item['where'])} | `{item['target']}` | "
          f"{'yes' if item['planned'] else 'no: ' + _cell(item.get('reason', 'NO REASON'))} |" for item in outputs),
        "", "## Settings of the paper's runs", "",
        "| setting | tasks | ours | read from | paper | paper's source | authors | authors' source |",
        "|---|---|---|---|---|---|---|---|",
        *(f"| {_cell(r.setting)} | {', '.join(r.tasks)} | {_cell(_show(r.ours))}{' ≠' if r.differs else ''} | "
          f"{_cell(r.ours_from)} | {_cell(_show(r.paper))} | {_cell(r.paper_source)} | {_cell(_show(r.authors))} | "
          f"{_cell(r.authors_source)} |" for r in rows),
        "", f"## Differences ({len(differing)})", "",
        "Every setting where the plan's value differs from a value the paper or the authors state, with its reason.",
        "",
        *(f"- **{_cell(r.setting)}** ({', '.join(r.tasks)}): ours {_cell(_show(r.ours))}; "
          + "; ".join(f"{who} {_cell(_show(getattr(r, who)))}" for who in r.differs)
          + f". Reason: {_cell(r.reason or 'NO REASON')}" for r in differing),
    ]
    return "\n".join(lines) + "\n"


def stale(repo: Path = REPO) -> bool:
    path = repo / LEDGER
    return not path.is_file() or path.read_text(encoding="utf-8") != ledger_text(repo)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the ledger (or, with ``--check``, say whether it is stale or lacks a reason, and exit 1 if so)."""
    parser = entry_parser(__doc__, COMMAND.removeprefix("python -m "), summary="line", logs=False)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale or a reason is missing")
    args = parser.parse_args(argv)
    problems = missing_reasons(*ledger_rows())
    for problem in problems:
        print(problem)
    if args.check:
        if stale():
            print(f"{LEDGER} is stale: run `{COMMAND}`")
            return 1
        return 1 if problems else 0
    text = ledger_text()
    if not (REPO / LEDGER).is_file() or (REPO / LEDGER).read_text(encoding="utf-8") != text:
        write_text(REPO / LEDGER, text)
        print(f"wrote {LEDGER}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
