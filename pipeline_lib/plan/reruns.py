"""``python -m pipeline_lib reruns [--configfile F]... (PATHS ... | --since REV) [--json]``: what an edit reruns.

Before anything runs: the jobs of a config's workflow that an edit of code would rerun, per rule, with the plan's
estimated GPU-hours (a training run's work estimate, :mod:`pipeline_lib.plan.estimates`; else the Slurm request) and
the CPU-hours its CPU jobs ask for. Snakemake reruns a job when its ``code`` parameter changes, and that parameter is
:func:`pipeline_lib.core.provenance.code_digest` over the files the job's entry point imports: this command builds the
workflow's DAG (every job, as ``--forceall`` would) and reads each job's own ``code`` parameter back as the entry
modules that made it (:func:`~pipeline_lib.core.provenance.digest_entries`), so it prices exactly what the rules
compare, with no second list of which rule runs which code.

``PATHS``: files whose code changes (an edit in progress, or one being considered). ``--since REV``: the files that
differ from ``REV`` in the working tree (``git diff``, untracked files too), kept only where their digest differs
(:func:`~pipeline_lib.core.provenance.source_digest`: a comment, docstring or layout edit of a module reruns nothing).
Only the code trigger is priced: an edit of a rule's command or of the config reruns through Snakemake's other
triggers (``python -m pipeline_lib plan`` prices a config).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.config import ConfigError
from pipeline_lib.core.provenance import code_modules, digest_entries, source_digest
from pipeline_lib.core.run_spec import PlanError
from pipeline_lib.plan.estimates import estimates, site_settings
from pipeline_lib.plan.runs import plan_runs
from pipeline_lib.plan.table import REPO, load_config, load_profile, requested

__all__ = ["Job", "changed_code", "edited_since", "main", "planned_jobs", "render", "rerun_jobs"]


@dataclass(frozen=True)
class Job:
    """One job of the workflow: its rule, its name (wildcards), the files its code digest covers and its price."""

    rule: str
    name: str
    files: frozenset[str]  # repository-relative: the keys of code_modules over the job's entry modules
    gpu_hours: float
    cpu_hours: float


def _dag_jobs(configfiles: Sequence[str | Path], root: Path) -> list[Any]:
    """Every job of the workflow under ``configfiles`` (Snakemake's DAG with every output to be made), its console
    output kept back (it is printed only if the DAG cannot be built)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        ConfigSettings,
        DAGSettings,
        OutputSettings,
        Quietness,
        ResourceSettings,
        StorageSettings,
    )

    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said), \
                SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
            workflow_api = api.workflow(
                resource_settings=ResourceSettings(cores=1),
                config_settings=ConfigSettings(configfiles=[Path(f).resolve() for f in configfiles]),
                storage_settings=StorageSettings(), snakefile=root / "Snakefile", workdir=root)
            workflow = workflow_api.dag(dag_settings=DAGSettings(forceall=True)).workflow_api._workflow
            workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True)
            workflow._build_dag()
            return [job for job in workflow.dag.jobs if getattr(job.params, "code", None) is not None]
    except Exception:
        sys.stderr.write(said.getvalue()[-5000:])
        raise


def planned_jobs(configfiles: Sequence[str | Path], profile: Mapping[str, Any] | None = None,
                 root: Path = REPO) -> list[Job]:
    """Every job of the config's workflow that carries a ``code`` parameter, with the code it covers and its price:
    GPU-hours the plan's estimate of a training run's work where there is one, else what its Slurm job asks for
    (GPUs x time limit at the first attempt); CPU-hours threads x time limit for a job with no GPU."""
    config = load_config(configfiles)
    plan = plan_runs(config)
    found = estimates(config, plan)
    site = site_settings(config)
    profile = dict(profile or load_profile())
    threads = profile.get("set-threads") or {}
    jobs = []
    for job in _dag_jobs(configfiles, root):
        rule = job.rule.name
        files: set[str] = set()
        for entry in digest_entries(str(job.params.code)):
            files |= set(code_modules(entry))
        key = job.wildcards_dict.get("run")
        gpus, hours = requested(rule, dict(job.resources.items()), profile, site)
        estimate = found.get((rule, key)) if key else None
        gpu = estimate.gpu_hours if estimate is not None and estimate.gpu_hours is not None else gpus * hours
        cpu = 0.0 if gpus else int(threads.get(rule, job.threads)) * hours
        name = ",".join(f"{k}={v}" for k, v in job.wildcards_dict.items()) or str(job.output[0] if job.output else "")
        jobs.append(Job(rule, name, frozenset(files), gpu, cpu))
    return jobs


def _relative(path: str | Path, root: Path) -> str:
    resolved = Path(path).resolve() if Path(path).is_absolute() or Path(path).exists() else root / path
    try:
        return str(resolved.relative_to(root))
    except ValueError:
        return str(path)


def changed_code(versions: Mapping[str, tuple[bytes | None, bytes | None]]) -> list[str]:
    """The files whose digest differs between two versions (before, after; None: absent), in path order: a module
    whose only change is a comment, a docstring or its layout is left out."""
    def digest(name: str, source: bytes | None) -> str | None:
        if source is None:
            return None
        try:
            return source_digest(name, source)
        except SyntaxError:  # a module that does not parse is a change of its code
            return "unparsable:" + source.hex()
    return sorted(name for name, (before, after) in versions.items() if digest(name, before) != digest(name, after))


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, check=False)


def edited_since(rev: str, root: Path = REPO) -> tuple[list[str], list[str]]:
    """(files whose code differs from ``rev``, files that differ only in wording or layout) of the working tree."""
    listed = _git(root, "diff", "--name-only", "--no-renames", rev, "--")
    if listed.returncode != 0:
        raise ValueError(f"git diff {rev}: {listed.stderr.decode().strip()}")
    untracked = _git(root, "ls-files", "--others", "--exclude-standard").stdout.decode().split()
    names = sorted({*listed.stdout.decode().split(), *untracked})
    versions = {}
    for name in names:
        old = _git(root, "show", f"{rev}:{name}")
        path = root / name
        versions[name] = (old.stdout if old.returncode == 0 else None, path.read_bytes() if path.is_file() else None)
    changed = changed_code(versions)
    return changed, [name for name in names if name not in changed]


def rerun_jobs(jobs: Iterable[Job], edited: Iterable[str]) -> list[tuple[Job, list[str]]]:
    """Each job whose code digest covers an edited file, with those files."""
    edited = set(edited)
    return [(job, sorted(job.files & edited)) for job in jobs if job.files & edited]


#: Rules listed by name, the costliest first (the rest summed in one line): the output fits one screen.
MAX_RULES = 20


def _hours(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def render(jobs: Sequence[Job], reruns: Sequence[tuple[Job, list[str]]], edited: Sequence[str],
           wording: Sequence[str] = ()) -> str:
    """One screen: per rule the jobs that rerun of those planned and their hours, then the totals."""
    planned: dict[str, int] = defaultdict(int)
    for job in jobs:
        planned[job.rule] += 1
    by_rule: dict[str, list[Job]] = defaultdict(list)
    for job, _ in reruns:
        by_rule[job.rule].append(job)
    lines = [f"edited code: {len(edited)} file(s)" + (f" ({', '.join(edited[:6])}{', ...' if len(edited) > 6 else ''})"
                                                      if edited else "")]
    if wording:
        lines.append(f"wording or layout only (rerun nothing): {len(wording)} file(s)")
    if not reruns:
        return "\n".join([*lines, "reruns: no job"])
    order = sorted(by_rule, key=lambda r: (-sum(j.gpu_hours for j in by_rule[r]),
                                           -sum(j.cpu_hours for j in by_rule[r]), r))
    shown, rest = order[:MAX_RULES], order[MAX_RULES:]
    width = max(len(rule) for rule in [*shown, "total"])
    lines.append(f"{'rule':<{width}}  {'jobs':>9}  {'GPU-h':>9}  {'CPU-h':>7}")
    for rule in shown:
        rerun = by_rule[rule]
        lines.append(f"{rule:<{width}}  {len(rerun):>4} / {planned[rule]:<3}  "
                     f"{_hours(sum(j.gpu_hours for j in rerun)):>9}  {_hours(sum(j.cpu_hours for j in rerun)):>7}")
    if rest:
        others = [j for rule in rest for j in by_rule[rule]]
        lines.append(f"... and {len(rest)} more rules ({len(others)} jobs, {_hours(sum(j.gpu_hours for j in others))} "
                     f"GPU-h, {_hours(sum(j.cpu_hours for j in others))} CPU-h; --json lists every job)")
    lines.append(f"{'total':<{width}}  {len(reruns):>4} / {len(jobs):<3}  "
                 f"{_hours(sum(j.gpu_hours for j, _ in reruns)):>9}  {_hours(sum(j.cpu_hours for j, _ in reruns)):>7}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib reruns", summary="line", logs=False)
    parser.add_argument("paths", nargs="*", help="files whose code changes")
    parser.add_argument("--since", metavar="REV", help="the files that differ from git revision REV instead")
    parser.add_argument("--configfile", action="append", metavar="FILE",
                        help="a config file; repeated, merged in order (default: the tiny default config/config.yaml)")
    parser.add_argument("--profile", type=Path, default=None, help="Slurm profile pricing each job's request")
    parser.add_argument("--json", action="store_true", help="one JSON object per job that reruns")
    args = parser.parse_args(argv)
    if bool(args.paths) == bool(args.since):
        parser.error("name the edited files, or --since REV (not both)")
    root = REPO
    try:
        if args.since:
            edited, wording = edited_since(args.since, root)
        else:
            edited, wording = sorted({_relative(p, root) for p in args.paths}), []
        jobs = planned_jobs(args.configfile or ["config/config.yaml"], load_profile(args.profile), root)
    except (ConfigError, PlanError, ValueError) as exc:
        print(f"python -m pipeline_lib reruns: {exc}", file=sys.stderr)
        return 2
    reruns = rerun_jobs(jobs, edited)
    if args.json:
        print("\n".join(json.dumps({"rule": job.rule, "job": job.name, "gpu_hours": job.gpu_hours,
                                    "cpu_hours": job.cpu_hours, "files": files}) for job, files in reruns))
    else:
        print(render(jobs, reruns, edited, wording))
    return 0
