"""``python -m pipeline_lib plan [--configfile FILE ...]``: the run table of a config, before anything runs.

One row per training job of :func:`pipeline_lib.plan.plan_runs` (task, run, method, seed, engine, rule, study, the
key hyperparameters, the resources the plan sets and the GPU-hours the job requests from Slurm), then the number of
jobs per rule and the GPU-hours in total and per seed, so a user of ``config/paper.yaml`` can price each extra seed
before paying for it. Config files merge in order, as Snakemake's ``--configfile A B`` does, and the schema fills what
they leave out.

A job's GPU-hours are what its Slurm allocation asks for on the first attempt: GPUs (``nodes`` x the ``gres`` GPUs
per node, or ``gpu``; from the plan, else from the profile's ``set-resources``) times the time limit (the profile's
``runtime`` in minutes, at ``attempt`` = 1). A job that ends early uses less; a retried one (``retries`` in the
profile) asks again with a longer limit.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.config import ConfigError, load_config_file, merge_config, schema_path
from pipeline_lib.core.run_spec import PlanError
from pipeline_lib.core.yaml_files import load_yaml
from pipeline_lib.plan.estimates import SITE_TIMED, Estimate, disk_needs, estimates, site_defaults, site_settings
from pipeline_lib.plan.groups import train_groups
from pipeline_lib.plan.runs import Plan, Run, plan_runs, validate_planned_config

__all__ = ["gpu_hours", "job_of_run", "load_config", "load_profile", "main", "plan_gpu_hours", "render", "requested",
           "slurm_jobs"]

REPO = Path(__file__).resolve().parents[2]
#: The Slurm profile whose time limits and GPU counts price the paper plan.
SLURM_PROFILE = Path("profiles") / "slurm" / "config.yaml"
COLUMNS = ("task", "run", "method", "seed", "engine", "job", "study", "advantage", "params", "M", "steps", "lr",
           "resources", "est_gpu_h", "attempts", "ckpt_every", "mem_gb", "disk_gb", "gpu_h")
#: The estimate columns (pipeline_lib/plan/estimates.py): GPU-hours of the work, Slurm attempts under the site's
#: MaxTime, the checkpoint interval in steps, peak GB per GPU, GB on disk (scratch + results); gpu_h is the request.
#: A profile value Snakemake evaluates per attempt: ``60``, ``"60"`` or ``"60 * attempt"``.
_PER_ATTEMPT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:\*\s*attempt)?\s*$")


def load_config(paths: Sequence[str | Path], schema: str | Path | None = None) -> dict[str, Any]:
    """The validated config of ``paths`` merged in order (schema defaults filled)."""
    schema = schema or schema_path()
    config: dict[str, Any] = {}
    for path in paths:
        merge_config(config, load_config_file(path))
    return dict(validate_planned_config(config, schema))


def load_profile(path: str | Path | None = None) -> dict[str, Any]:
    """The Slurm profile (default: ``profiles/slurm/config.yaml`` of the current directory, else of this checkout)."""
    path = Path(path) if path else (SLURM_PROFILE if SLURM_PROFILE.is_file() else REPO / SLURM_PROFILE)
    profile = load_yaml(path, "Slurm profile", ConfigError) or {}
    profile["_path"] = str(path)
    return profile


def _first_attempt(value: Any, where: str) -> float:
    """A profile resource at attempt 1 (``"1440 * attempt"`` -> 1440)."""
    match = _PER_ATTEMPT.match(str(value))
    if match is None:
        raise ValueError(f"{where}: {value!r} is not a number or 'N * attempt'; cannot price the plan's GPU-hours")
    return float(match.group(1))


def slurm_jobs(config: Mapping[str, Any], plan: Plan) -> dict[tuple[str, str], tuple[str, int]]:
    """(rule, run key) -> (the rule whose Slurm job runs it, how many runs share that job): a run of a group
    (:mod:`pipeline_lib.plan.groups`) runs inside its group's job, as the workflow's group rules take it over."""
    out = {(run.job, run.key): (run.job, 1) for run in plan.runs}
    for rule, group in train_groups(config, plan).items():
        for task in group.tasks:
            for seed in group.seeds:
                for run in group.runs(plan, task, seed):
                    out[run.job, run.key] = (rule, len(group.methods))
    return out


def job_of_run(config: Mapping[str, Any], plan: Plan) -> dict[tuple[str, str], tuple[str, str]]:
    """(rule, run key) -> (the rule of the Snakemake job that trains it, that job's identity): a group's members
    (:mod:`pipeline_lib.plan.groups`) share one job per (task, seed), so the plan prints and counts the jobs
    Snakemake runs, not one per run."""
    out = {(run.job, run.key): (run.job, run.key) for run in plan.runs}
    for rule, group in train_groups(config, plan).items():
        for task in group.tasks:
            for seed in group.seeds:
                for run in group.runs(plan, task, seed):
                    out[run.job, run.key] = (rule, f"{task}/seed{seed}")
    return out


def gpu_hours(run: Run, profile: dict[str, Any], rule: str | None = None, shared_by: int = 1,
              site: Mapping[str, Any] | None = None) -> float:
    """GPUs x time limit (hours) that ``run``'s Slurm job requests on its first attempt (0 for a CPU job); ``rule``
    is the job's rule when a group runs it (then split among the ``shared_by`` runs of the job)."""
    rule = rule or run.job
    gpus, hours = requested(rule, run.resources if rule == run.job else {}, profile, site)
    return gpus * hours / shared_by


def requested(rule: str, resources: Mapping[str, Any], profile: Mapping[str, Any],
              site: Mapping[str, Any] | None = None) -> tuple[int, float]:
    """(GPUs, time limit in hours) a job of ``rule`` asks Slurm for on its first attempt: the profile's default and
    per-rule resources under the job's own ``resources``; a GPU job with no time limit is an error, a CPU job's
    limit is 0 where none is set."""
    resources = {**(profile.get("default-resources") or {}), **((profile.get("set-resources") or {}).get(rule) or {}),
                 **{k: v for k, v in resources.items() if k in ("gres", "nodes", "gpu", "runtime")}}
    where = f"{profile.get('_path', 'profile')}: set-resources.{rule}"
    if "gres" in resources:
        match = re.fullmatch(r"gpu(?::[\w-]+)?:(\d+)", str(resources["gres"]))
        if match is None:
            raise ValueError(f"{where}.gres: {resources['gres']!r} is not 'gpu:N' or 'gpu:TYPE:N'")
        gpus = int(resources.get("nodes", 1)) * int(match.group(1))
    else:
        gpus = int(_first_attempt(resources.get("gpu", 0), f"{where}.gpu"))
    own = (profile.get("set-resources") or {}).get(rule) or {}
    if gpus and "runtime" not in own and rule in SITE_TIMED:  # the rule asks for the partition's MaxTime
        resources["runtime"] = (site or site_defaults())["max_runtime_min"]
    if "runtime" not in resources:
        if gpus:
            raise ValueError(f"{where}: a GPU job with no runtime (time limit) here or in default-resources")
        return 0, 0.0
    return gpus, _first_attempt(resources["runtime"], f"{where}.runtime") / 60


def _hours(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:g}"


def plan_gpu_hours(config: Mapping[str, Any], plan: Plan, profile: dict[str, Any]) -> list[float]:
    """:func:`gpu_hours` of every run of ``plan``, in its order."""
    jobs = slurm_jobs(config, plan)
    site = site_settings(config)
    return [gpu_hours(run, profile, *jobs[run.job, run.key], site=site) for run in plan.runs]


def _estimate_cells(estimate: Estimate | None) -> dict[str, str]:
    """The estimate columns of one run ("-" where the plan cannot size it)."""
    if estimate is None:
        return {"est_gpu_h": "-", "attempts": "-", "ckpt_every": "-", "mem_gb": "-", "disk_gb": "-"}
    def fmt(value: float | None, digits: str) -> str:
        return "-" if value is None else format(value, digits)
    return {"est_gpu_h": "-" if estimate.gpu_hours is None else _hours(round(estimate.gpu_hours, 1)),
            "attempts": str(estimate.attempts), "ckpt_every": fmt(estimate.checkpoint_every, "d"),
            "mem_gb": fmt(estimate.memory_gb, ".1f"), "disk_gb": fmt(estimate.scratch_gb + estimate.results_gb, ".0f")}


def render(plan: Plan, hours: Sequence[float], profile_path: str,
           jobs: Mapping[tuple[str, str], tuple[str, str]] | None = None,
           found: Mapping[tuple[str, str], Estimate] | None = None,
           disk: Mapping[str, float] | None = None) -> str:
    """The run table as aligned text, then the training jobs per rule and the cost: GPU-hours estimated from the
    runs' tokens where the plan can size them, with the request beside (total, per seed, per study).
    ``jobs`` (:func:`job_of_run`) names the rule whose job trains each run (a group's rule for its members) and
    which runs share a job; without it every run is its own job of its own rule."""
    jobs = jobs or {(run.job, run.key): (run.job, run.key) for run in plan.runs}
    rows = [{column: row.get(column, "") for column in COLUMNS} | {"gpu_h": _hours(h),
                                                                   "job": jobs[run.job, run.key][0]}
            | _estimate_cells((found or {}).get((run.job, run.key)))
            for row, h, run in zip(plan.table(), hours, plan.runs, strict=True)]
    cells = [[str(row[c]) if row[c] is not None else "" for c in COLUMNS] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    distinct = {jobs[run.job, run.key] for run in plan.runs}
    counts = Counter(rule for rule, _ in distinct)
    members = Counter(jobs[run.job, run.key][0] for run in plan.runs)
    per_rule = [f"{rule} {n}" + (f" ({members[rule]} runs)" if members[rule] != n else "")
                for rule, n in sorted(counts.items())]
    lines += ["", f"{len(plan.runs)} training runs in {len(distinct)} Snakemake training jobs: " + ", ".join(per_rule)
              + " (data, evaluation, judging and paper jobs not counted: `snakemake -n` lists every job)"]
    if found:
        lines += [_cost_line(plan, hours, found, profile_path)]
    else:  # no run the plan can size (the tiny default): the request is all there is
        per_seed: dict[int, float] = defaultdict(float)
        per_study: dict[str, float] = defaultdict(float)
        for run, h in zip(plan.runs, hours, strict=True):
            per_seed[run.seed] += h
            per_study[run.study] += h
        lines += [f"GPU-hours requested (GPUs x Slurm time limit of {profile_path}, first attempt; training jobs "
                  f"only, evaluation and judging not counted): {_hours(sum(hours))} in total; per seed: "
                  + ", ".join(f"seed {seed} {_hours(h)}" for seed, h in sorted(per_seed.items()))
                  + "; per study: " + ", ".join(f"{study} {_hours(h)}" for study, h in per_study.items())]
    if disk:
        lines += [f"Disk estimated: {disk['results']:,.0f} GB under results, {disk['scratch']:,.0f} GB under "
                  "site.scratch_root (every run's checkpoints and dumps at once: an upper bound)"]
    return "\n".join(lines)


def _cost_line(plan: Plan, hours: Sequence[float], found: Mapping[tuple[str, str], Estimate],
               profile_path: str) -> str:
    """The cost summary: GPU-hours estimated from the runs' tokens (:mod:`.estimates`), in total, per seed and per
    study, each with the request beside it; GPU jobs the plan cannot size are counted at their request, and said."""
    estimated: dict[str, dict[Any, float]] = {"total": defaultdict(float), "seed": defaultdict(float),
                                              "study": defaultdict(float)}
    requested: dict[str, dict[Any, float]] = {"total": defaultdict(float), "seed": defaultdict(float),
                                              "study": defaultdict(float)}
    unsized = [0, 0.0]  # GPU jobs without an estimate, their request
    for run, h in zip(plan.runs, hours, strict=True):
        estimate = found.get((run.job, run.key))
        work = estimate.gpu_hours if estimate is not None and estimate.gpu_hours is not None else None
        if work is None and h > 0:
            unsized[0], unsized[1] = unsized[0] + 1, unsized[1] + h
        for part, key in (("total", None), ("seed", run.seed), ("study", run.study)):
            estimated[part][key] += work if work is not None else h
            requested[part][key] += h

    def cell(part: str, key: Any) -> str:
        return f"{_hours(estimated[part][key])} (requested {_hours(requested[part][key])})"

    line = (f"GPU-hours estimated from the runs' tokens (site.gpu_tflops; requested beside: GPUs x Slurm time limit "
            f"of {profile_path}, first attempt; training jobs only, evaluation and judging not counted): "
            f"{cell('total', None)} in total; per seed: "
            + ", ".join(f"seed {seed} {cell('seed', seed)}" for seed in sorted(estimated["seed"]))
            + "; per study: " + ", ".join(f"{study} {cell('study', study)}" for study in estimated["study"]))
    if unsized[0]:
        line += f"; {unsized[0]} GPU jobs not estimated (not verl) counted at their request, {_hours(unsized[1])}"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib plan", summary="line", logs=False)
    parser.add_argument("--configfile", nargs="+", default=["config/config.yaml"],
                        help="config file(s), merged in order (default: the tiny default config/config.yaml)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="Slurm profile whose time limits and GPU counts price each job (default: "
                             f"{SLURM_PROFILE})")
    parser.add_argument("--json", action="store_true", help="one JSON object per run instead of the table")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.configfile)
        plan = plan_runs(config)
        profile = load_profile(args.profile)
    except (ConfigError, PlanError) as exc:  # a sentence that names the file or key, not a traceback
        print(f"python -m pipeline_lib plan: {exc}", file=sys.stderr)
        return 2
    hours = plan_gpu_hours(config, plan, profile)
    if args.json:
        print("\n".join(json.dumps(row | {"gpu_hours": h}) for row, h in zip(plan.table(), hours, strict=True)))
    else:
        print(render(plan, hours, profile["_path"], job_of_run(config, plan), estimates(config, plan),
                     disk_needs(config, plan)))
    return 0
