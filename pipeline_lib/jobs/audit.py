"""Audit an output: walk its provenance chain back to the raw data and check every link.

    python -m pipeline_lib audit results/paper/tables/table1.tex

For each file in the chain: its sidecar exists, its sha256 matches the sidecar, each input
exists and still has the hash the consuming step recorded; every training step's DONE
sentinel reached its final step; every step ran from a clean tree, and all steps ran from
the same code version (or the difference is listed); every step's recorded code digest
(the ``pipeline_lib`` files its entry point imports, untracked ones included) still
matches the files of this checkout, or the changed files are named; every step's recorded settings (the config
sections it read, :func:`pipeline_lib.core.provenance.step_config`) still equal the current config's, or the changed
settings are named (``--configfile``: the config to compare with, merged in order as Snakemake and ``plan`` do; default
the workflow's own inside a job, else config/config.yaml). A file whose sidecar
was deleted is flagged when the step that used it recorded a sidecar; only an input that
had none when it was used (a fixture, a download) is a raw leaf of the chain.

The tree is as compact as its facts: the files one job wrote that a consumer read share one line
(``run/final/{config.json, model.safetensors}``; a group job's runs too: ``countdown_tiny/{grpo_exact,
softmax_exact}/seed0/final/...  [ok] step train_rl ..., 2 runs of job train_local_group (its log)``, the job read
from Snakemake's record of each output, ``.snakemake/metadata``; a file made outside the workflow is its step run's),
each job's inputs are printed once, and a later reference to it is a ``(see above: ...)`` line; every reference's
recorded hash is still checked.
"""

from __future__ import annotations

import base64
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.env import env
from pipeline_lib.core.io import sha256_file, write_text
from pipeline_lib.core.provenance import SIDECAR_SUFFIX, code_modules, config_settings
from pipeline_lib.plan.table import load_config

__all__ = ["AuditReport", "audit"]


@dataclass
class AuditReport:
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    code_versions: dict[tuple[Any, ...], list[str]] = field(default_factory=dict)
    files: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def _read_json_object(path: Path, what: str) -> tuple[dict[str, Any] | None, str | None]:
    """A JSON file that must hold an object: (content, None), or (None, a sentence naming the file and the fault)."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:  # truncated, not UTF-8, unreadable
        return None, f"{path}: unreadable {what} ({type(exc).__name__}: {str(exc)[:200]})"
    except RecursionError:  # nested deeper than the parser's stack: a hostile or broken file, not a crash
        return None, f"{path}: unreadable {what} (nested too deeply to read)"
    if not isinstance(content, dict):
        kind = "null" if content is None else type(content).__name__
        return None, f"{path}: {what} holds {kind}, not a JSON object"
    return content, None


def _file_entries(record: dict[str, Any], key: str, sidecar: Path, report: AuditReport) -> list[dict[str, Any]]:
    """The sidecar's ``inputs`` or ``outputs``; a malformed entry is a problem naming the sidecar, not a crash."""
    entries = record.get(key, [])
    if not isinstance(entries, list):
        report.problems.append(f"{sidecar}: '{key}' is {type(entries).__name__}, not a list of files")
        return []
    good = [e for e in entries if isinstance(e, dict) and isinstance(e.get("path"), str)
            and isinstance(e.get("sha256"), str)]
    if len(good) != len(entries):
        report.problems.append(f"{sidecar}: {len(entries) - len(good)} of its '{key}' entries lack a path or sha256")
    return good


def _check_done(outputs: list[dict[str, Any]], report: AuditReport) -> None:
    for output in outputs:
        if Path(output["path"]).name == "DONE.json" and Path(output["path"]).is_file():
            done, problem = _read_json_object(Path(output["path"]), "DONE sentinel")
            if problem is not None or done is None:
                report.problems.append(str(problem))
            elif done.get("final_step") != done.get("total_steps"):
                report.problems.append(f"{output['path']}: run stopped at step {done.get('final_step')} of "
                                       f"{done.get('total_steps')}")


def _code_changes(record: dict[str, Any]) -> str | None:
    """Which of the step's code files differ from this checkout (None when all match)."""
    recorded = record.get("code_digest")
    if not isinstance(recorded, dict) or not isinstance(recorded.get("modules"), dict):
        return "no code digest recorded (made by an older pipeline), so it cannot be checked against this code"
    if not isinstance(recorded.get("entry"), str | None):
        return f"its recorded entry module {recorded.get('entry')!r} is not a module name"
    try:
        current = code_modules(recorded.get("entry"))
    except (ValueError, OSError, SyntaxError) as exc:
        return f"its entry module {recorded.get('entry')!r} cannot be read in this checkout ({exc})"
    differences = _differences(recorded["modules"], current, shown=5)
    if differences is None:
        return None
    return f"made with older code (entry {recorded.get('entry') or 'whole package'}): {differences}"


def _config_changes(record: dict[str, Any], config: Mapping[str, Any] | None) -> str | None:
    """Which of the settings the step recorded differ in ``config`` (None when all match, or nothing to compare)."""
    made_with = record.get("step_config")
    if config is None or made_with is None:
        return None  # made outside the workflow (a test, a hand-run step), or by a step with no known sections
    if not isinstance(made_with, dict) or not isinstance(made_with.get("sections"), list) \
            or not isinstance(made_with.get("settings"), dict):
        return "its recorded step_config is malformed, so its config cannot be compared"
    now = config_settings(config, [str(s) for s in made_with["sections"]])
    differences = _differences(made_with["settings"], now, shown=8)
    if differences is None:
        return None
    return f"made with another config (step {record.get('step')}): {differences}"


def _differences(old: Mapping[str, Any], new: Mapping[str, Any], shown: int) -> str | None:
    """The keys changed, new and removed between two recorded mappings (at most ``shown`` each); None when equal."""
    changed = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
    added, removed = sorted(new.keys() - old.keys()), sorted(old.keys() - new.keys())
    parts = [f"{label} {', '.join(keys[:shown])}{' ...' if len(keys) > shown else ''}"
             for label, keys in (("changed", changed), ("new", added), ("removed", removed)) if keys]
    return "; ".join(parts) or None


def _is_raw(path: Path, raw: bool | None) -> bool:
    """Whether a file without a sidecar is a raw input; ``raw`` is what the consuming step recorded."""
    if raw is not None:
        return raw
    # a sidecar written before inputs recorded it: only data files outside results/ may be raw
    return path.suffix in {".parquet", ".jsonl", ".json", ".csv"} and "results" not in path.parts


@dataclass
class _File:
    """One file's own checks, done once however many steps read it."""

    flags: list[str]  # what is wrong with the file itself (MODIFIED, STALE CODE, ...); empty when it is sound
    tail: str  # the rest of its line: "step X @ commit", "raw input, sha256 ...", "NO SIDECAR", ...
    job: tuple[str, ...]  # the job that wrote it (Snakemake's), else its step run, else the path: one node of the tree
    actual: str | None = None
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    run: tuple[str, ...] = ()  # the step run that wrote it: its step and outputs


#: Where Snakemake's file-based persistence keeps its record of each output (relative to the workflow's directory).
SNAKEMAKE_METADATA = Path(".snakemake") / "metadata"


def _snakemake_job(path: Path) -> tuple[str, ...] | None:
    """The Snakemake job that made ``path``, from Snakemake's record of it (``.snakemake/metadata/<base64 path>``):
    ``("job", rule, log...)``; None when there is no readable record (made outside the workflow, another store)."""
    record_path = SNAKEMAKE_METADATA / base64.urlsafe_b64encode(str(path).encode()).decode()
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("rule"), str):
        return None
    logs = record.get("log") if isinstance(record.get("log"), list) else []
    return ("job", record["rule"], *(map(str, logs) if logs else (str(record.get("job_hash")),
                                                                 str(record.get("starttime")))))


class _Walk:
    """The provenance tree printed as compactly as its facts: the files one step run wrote that a consumer read share
    one line, each step run's inputs are printed once, and a later reference points back to it ("see above")."""

    def __init__(self, report: AuditReport, config: Mapping[str, Any] | None) -> None:
        self.report, self.config = report, config
        self.files: dict[Path, _File] = {}
        self.shown_jobs: set[tuple[str, ...]] = set()
        self.shown_files: set[Path] = set()
        self.checked_runs: set[tuple[str, ...]] = set()

    def check(self, path: Path, raw: bool | None, top: bool) -> _File:
        if path not in self.files:
            self.files[path] = self._check(path, raw, top)
        return self.files[path]

    def _check(self, path: Path, raw: bool | None, top: bool) -> _File:
        report, alone = self.report, (str(path),)
        if path.is_dir():
            report.problems.append(f"{path}: a directory, not a file (audit a file the pipeline wrote, e.g. its "
                                   "DONE.json or a table)")
            return _File(["DIRECTORY"], "", alone)
        if not path.is_file():
            report.problems.append(f"{path}: missing")
            return _File(["MISSING"], "", alone)
        actual = sha256_file(path)
        report.files += 1
        sidecar = _sidecar(path)
        if not sidecar.is_file():
            if top or not _is_raw(path, raw):
                report.problems.append(f"{path}: no provenance sidecar {sidecar.name}"
                                       + (" (it had one when it was used: deleted since)" if raw is False else ""))
                return _File([], "NO SIDECAR", alone, actual)
            return _File([], f"raw input, sha256 {actual[:12]}", alone, actual)  # a fixture or download: a leaf
        record, problem = _read_json_object(sidecar, "provenance sidecar")
        if problem is not None or record is None:
            report.problems.append(str(problem))
            return _File([], "UNREADABLE SIDECAR", alone, actual)
        flags: list[str] = []
        outputs = _file_entries(record, "outputs", sidecar, report)
        own = next((o for o in outputs if Path(o["path"]) == path), None)
        if own is None:
            report.problems.append(f"{sidecar}: does not list {path} among its outputs")
        elif own["sha256"] != actual:
            report.problems.append(f"{path}: sha256 {actual[:12]} differs from its sidecar's {own['sha256'][:12]} "
                                   "(modified after it was written)")
            flags.append("MODIFIED")
        code = record.get("code") if isinstance(record.get("code"), dict) else {}
        report.code_versions.setdefault((code.get("git_commit"), code.get("diff_sha256")), []).append(str(path))
        if code.get("dirty"):
            flags.append("dirty tree")
        stale = _code_changes(record)
        if stale:
            report.problems.append(f"{path}: {stale}")
            flags.append("STALE CODE")
        drift = _config_changes(record, self.config)
        if drift:
            report.problems.append(f"{path}: {drift}")
            flags.append("STALE CONFIG")
        run = (str(record.get("step")), *sorted(o["path"] for o in outputs)) if own is not None else alone
        # the job: Snakemake's record of this file, else of another output of its step run (a run's DONE.json is the
        # rule's output, its model files are not)
        made_by = (_snakemake_job(Path(p)) for p in dict.fromkeys([str(path), *(o["path"] for o in outputs)]))
        job = next((j for j in made_by if j is not None), run) if own is not None else alone
        return _File(flags, f"step {record.get('step')} @ {str(code.get('git_commit'))[:10]}", job, actual,
                     _file_entries(record, "inputs", sidecar, report), outputs, run)

    def edge(self, path: Path, expected_sha: str | None, consumer: Path | None) -> str | None:
        """The consuming step's recorded hash against the file now: "CHANGED" (and a problem) when they differ."""
        actual = self.files[path].actual
        if expected_sha is None or actual is None or actual == expected_sha:
            return None
        self.report.problems.append(f"{path}: content changed since it was used (sha256 {actual[:12]} != recorded "
                                    f"{expected_sha[:12]}{f' by the step that made {consumer}' if consumer else ''})")
        return "CHANGED"

    def visit(self, entries: list[dict[str, Any]], depth: int, consumer: Path | None) -> None:
        """Print ``entries`` (a step's inputs) grouped by the step run that wrote them, each run's inputs once."""
        indent = "  " * depth
        jobs: dict[tuple[str, ...], list[tuple[Path, str | None]]] = {}
        for entry in entries:
            path = Path(entry["path"])
            file = self.check(path, entry.get("raw"), consumer is None)
            changed = self.edge(path, entry.get("sha256"), consumer)
            members = jobs.setdefault(file.job, [])
            if all(p != path for p, _ in members):
                members.append((path, changed))
        above: list[str] = []
        for job, members in jobs.items():
            name = _names([p for p, _ in members])
            statuses = [", ".join(filter(None, [changed, *self.files[p].flags])) or "ok" for p, changed in members]
            unique = len({p.name for p, _ in members}) == len(members)  # else a group job's runs: whole paths
            status = statuses[0] if len(set(statuses)) == 1 else "; ".join(
                f"{p.name if unique else p}: {s}" for (p, _), s in zip(members, statuses, strict=True))
            tail = self.files[members[0][0]].tail
            runs = list(dict.fromkeys(self.files[p].run for p, _ in members))
            if len(runs) > 1 and job[0] == "job":
                tail += f", {len(runs)} runs of job {job[1]}" + (f" ({job[2]})" if len(job) == 3 else "")
            if job in self.shown_jobs:
                new = [p for p, _ in members if p not in self.shown_files]
                if new:  # other files of a step run shown above: their own line, its inputs not again
                    self.shown_files.update(new)
                    more = ", its inputs above" if self.files[members[0][0]].inputs else ""
                    self.report.lines.append(f"{indent}{_names(new)}  [{status}] {tail}{more}")
                if len(new) < len(members):
                    old = _names([p for p, _ in members if p not in new])
                    above.append(old if status == "ok" else f"{old} [{status}]")
                continue
            self.shown_jobs.add(job)
            self.shown_files.update(p for p, _ in members)
            self.report.lines.append(f"{indent}{name}  [{status}] {tail}".rstrip())
            for path, _ in members:  # once per step run
                if self.files[path].run not in self.checked_runs:
                    self.checked_runs.add(self.files[path].run)
                    _check_done(self.files[path].outputs, self.report)
            inputs: list[dict[str, Any]] = []
            for path, _ in members:
                inputs += [e for e in self.files[path].inputs if e not in inputs]
            self.visit(inputs, depth + 1, members[0][0])
        if above:
            self.report.lines.append(f"{indent}(see above: {', '.join(above)})")


def _names(paths: list[Path]) -> str:
    """Paths as one pattern with a ``{a, b}`` where they differ, when they are every combination of those
    (``results/train/t/{grpo, softmax}/seed0/final/{config.json, model.safetensors}``); otherwise each directory's
    files as ``dir/{a, b}``, joined."""
    if len(paths) < 2:
        return ", ".join(str(p) for p in paths)
    parts = [p.parts for p in paths]
    if len({len(x) for x in parts}) == 1:
        options = [list(dict.fromkeys(x[i] for x in parts)) for i in range(len(parts[0]))]
        if math.prod(len(o) for o in options) == len(set(parts)):
            pieces = [o[0] if len(o) == 1 else f"{{{', '.join(o)}}}" for o in options]
            return pieces[0] + "/".join(pieces[1:]) if pieces[0] == "/" else "/".join(pieces)
    by_dir: dict[Path, list[str]] = {}
    for path in paths:
        by_dir.setdefault(path.parent, []).append(path.name)
    return ", ".join(f"{d}/{{{', '.join(n)}}}" if len(n) > 1 else str(d / n[0]) for d, n in by_dir.items())


def current_config(configfiles: Sequence[str | Path] | None = None) -> dict[str, Any] | None:
    """The config to compare recorded settings with: ``configfiles`` merged and resolved as ``plan`` does; default
    the workflow's resolved config inside a job (``PIPELINE_CONFIG_FILE``), else config/config.yaml when present."""
    if configfiles:
        return load_config(configfiles)
    inside = env("PIPELINE_CONFIG_FILE")
    if inside is not None:
        config = json.loads(Path(inside).read_text(encoding="utf-8"))
        return config if isinstance(config, dict) else None
    return load_config(["config/config.yaml"]) if Path("config/config.yaml").is_file() else None


def audit(target: str | Path, config: Mapping[str, Any] | None = None) -> AuditReport:
    """The audit of ``target``'s chain; with ``config``, each step's recorded settings are compared with it."""
    report = AuditReport()
    _Walk(report, config).visit([{"path": str(target), "sha256": None}], 0, None)
    if len(report.code_versions) > 1:
        versions = "; ".join(f"{commit and commit[:10]}+diff {diff and diff[:10]}: {len(paths)} file(s)"
                             for (commit, diff), paths in report.code_versions.items())
        report.problems.append(f"the chain was produced by {len(report.code_versions)} code versions: {versions}")
    for (commit, diff), paths in report.code_versions.items():
        if diff is not None:
            report.problems.append(f"{len(paths)} file(s) were made from a dirty tree (commit {str(commit)[:10]}, "
                                   f"uncommitted diff {diff[:10]}), e.g. {paths[0]}")
    return report


def render(report: AuditReport) -> str:
    lines = [*report.lines, "", f"{report.files} file(s) checked, {len(report.code_versions)} code version(s)"]
    if report.problems:
        lines += ["", f"AUDIT FAILED: {len(report.problems)} problem(s)", *[f"  - {p}" for p in report.problems]]
    else:
        lines.append("audit passed: every file exists, every hash matches, every run finished, one clean code version, "
                     "the code of every step unchanged")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib audit", logs=False)
    parser.add_argument("output", help="the file whose chain to audit")
    parser.add_argument("--out", default=None, help="also write the audit to this file")
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when problems are found (for reports)")
    parser.add_argument("--configfile", nargs="+", default=None,
                        help="the config each step's recorded settings are compared with (merged in order; default: "
                             "the workflow's inside a job, else config/config.yaml)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    report = audit(args.output, current_config(args.configfile))
    text = render(report)
    print(text, end="")
    if args.out:
        write_text(args.out, text)
    return 0 if report.ok or args.no_fail else 1
