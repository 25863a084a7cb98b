"""What the non-training rules read, pass and write, read off the run plan: the rules stay thin and name no method or
task.

* :func:`paper_steps`: every paper table and figure (and the data each is computed from) as one :class:`Step`, a
  rule of ``workflow/rules/paper.smk`` that runs one ``python -m pipeline_lib...`` command; each output is made by
  exactly one step.
* :func:`data_params`, :func:`eval_params`, :func:`judge_params`, :func:`judge_inputs`: the parameters (and the
  judge rules' inputs) of the data, evaluation and judge rule families, per wildcard.
"""

from __future__ import annotations

import json
import os
import shlex
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from pipeline_lib.core.cli import json_file
from pipeline_lib.paper.captions import ablation_differences
from pipeline_lib.plan import METHODS, Plan, RunId
from pipeline_lib.plan.groups import pattern
from pipeline_lib.plan.hub import ALPACA_EVAL_INSTRUCTIONS, ALPACA_EVAL_REPO
from pipeline_lib.plan.judges import JUDGES, judge_rubric, judge_spec, pairwise_tasks
from pipeline_lib.plan.registry import variant_runs
from pipeline_lib.plan.settings import PROMPTS_WITHOUT_REFERENCE, eval_spec, holdout_prompts, tiny_task_spec
from pipeline_lib.plan.site import build_goes_online
from pipeline_lib.plan.targets import (
    ADAPTIVE_OUTPUTS,
    ablation_cells,
    adaptive_comparison,
    cross_judge_file,
    judge_methods,
    judge_ours,
    judge_score_runs,
    judge_tasks,
    judged_runs,
    paired_requests,
    probe_output,
    probed_runs,
    report_inputs,
    rl_requests,
    run_ids_json,
    runs_of,
    scale_cells,
    selected_methods,
    table1_evaluations,
    test_splits,
    transfer_runs,
    validation_evaluations,
    variant_methods,
)

__all__ = ["Step", "calibration_pairwise_inputs", "data_params", "dataset_pattern", "eval_params", "judge_inputs",
           "judge_params", "paper_steps"]


@dataclass(frozen=True)
class Step:
    """One paper rule: ``python -m <module> <args>`` reading ``inputs`` and writing ``outputs`` (those in
    ``reports`` are shown in Snakemake's report with that caption, under workflow/report/, and category).
    Its log is ``logs/<name>.log`` and its benchmark ``results/benchmarks/<name>.tsv``."""

    name: str
    module: str
    args: str  # the command's arguments, with Snakemake's {input.x} / {output.x} / {params.x}
    outputs: dict[str, str]
    inputs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    reports: dict[str, tuple[str, str]] = field(default_factory=dict)
    code: str = ""  # the module whose code digest reruns the step (default: ``module``)
    files: tuple[str, ...] = ()  # JSON parameters the command names by file: ``{params.<key>_file}`` (cli.json_file)

    def command(self) -> Callable[..., str]:
        """The rule's ``command`` parameter: the step's command with its inputs, outputs and parameters filled in as
        Snakemake's shell formatting would (``:q`` quotes; a list is its items, space-separated). A parameter, not the
        rule's ``shell:`` string, because Snakemake evaluates that string again when the job runs, after the loop
        that defines the rules has moved on to the last step. A JSON parameter named in ``files`` reaches the
        command as the path of a content-addressed file holding it (``{params.<key>_file}``), not as JSON; the
        parameter itself is what Snakemake compares for reruns."""

        def fill(wildcards: Any, input: Any, output: Any) -> str:
            values = {key: value(wildcards, input, output) if callable(value) else value
                      for key, value in self.params.items()}
            params = SimpleNamespace(**values, **{f"{key}_file": json_file(values[key]) for key in self.files})
            return _SHELL_FORMAT.format(f"python -m {self.module} {self.args}", input=input, output=output,
                                        params=params)

        return fill

    @property
    def code_module(self) -> str:
        return self.code or self.module


class _ShellFormatter(string.Formatter):
    """Snakemake's shell formatting of a value: a list is its items joined by spaces; ``:q`` quotes each for the
    shell."""

    def format_field(self, value: Any, format_spec: str) -> str:
        items = [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
        if format_spec not in ("", "q"):
            raise ValueError(f"unsupported format {format_spec!r} in a step's command")
        return " ".join(shlex.quote(item) if format_spec == "q" else item for item in items)


_SHELL_FORMAT = _ShellFormatter()


def _table(stem: str) -> dict[str, str]:
    return {"tex": f"{stem}.tex", "md": f"{stem}.md", "csv": f"{stem}.csv"}


def _beside_run(runs: list[RunId], filename: str) -> dict[str, RunId]:
    """The file ``filename`` beside each run's sentinel -> the run: a ``--runs`` parameter
    (:func:`~pipeline_lib.plan.targets.run_ids_json`), from which a step reads each run's identity."""
    return {os.path.join(os.path.dirname(r.path), filename): r for r in runs}


def _stem(key: str) -> Callable[..., str]:
    """A table's stem parameter, from its .csv output (as Snakemake asks: a path prefix derived from the output)."""
    return lambda wildcards, input, output: output[key].removesuffix(".csv")


def _table_step(name: str, module: str, args: str, stem: str, inputs: dict[str, Any],
                params: dict[str, Any] | None = None, after: str = "", files: tuple[str, ...] = ()) -> Step:
    """A step writing one table as .tex/.md/.csv under ``results/paper/tables/<stem>`` (``--stem``, then ``after``),
    its markdown captioned by ``workflow/report/<stem>.rst``; ``files``: its JSON parameters (:class:`Step`)."""
    return Step(name, module, f"{args} --stem {{params.stem}}{after}", _table(f"results/paper/tables/{stem}"), inputs,
                {**(params or {}), "stem": _stem("csv")}, {"md": (f"{stem}.rst", "Results")}, files=files)


def paper_steps(config: Mapping[str, Any], plan: Plan, paper_targets: list[str]) -> list[Step]:
    """Every paper rule of ``config``'s plan (``paper_targets``: :func:`~pipeline_lib.plan.targets.stage_targets`'s
    ``paper``, which the reproduction report lists as made)."""
    label = config["label"]
    figures, tables, data = "results/paper/figures", "results/paper/tables", "results/paper/data"
    theory = Step(
        "paper_theory_data", "pipeline_lib.core.theory.compute",
        "--spec {params.spec_file} --seed {params.seed}"
        " --curves {output.curves} --weights {output.weights} --weight-view {output.weight_view}"
        " --verification-json {output.verification_json} --verification-md {output.verification_md}",
        {"curves": f"{data}/theory_curves.csv", "weights": f"{data}/theory_weights.csv",
         "weight_view": f"{data}/weight_view.csv", "verification_json": "results/paper/theory_verification.json",
         "verification_md": "results/paper/theory_verification.md"},
        # the sidecar's config digest comes from the job's environment (common.smk), so it is no parameter: a change
        # elsewhere in the config (a label) does not rerun the theory
        params={"spec": json.dumps(config["theory"]), "seed": config["seed"]},
        reports={"verification_md": ("theory_verification.rst", "Theory")}, files=("spec",))
    steps = [theory, Step(
        "paper_theory", "pipeline_lib.paper.theory",
        "--group-size {params.group_size} --curves {input.curves} --weights {input.weights}"
        " --weight-view {input.weight_view} --fig1a-png {output.fig1a_png} --fig1a-pdf {output.fig1a_pdf}"
        " --fig1b-png {output.fig1b_png} --fig1b-pdf {output.fig1b_pdf} --table-stem {params.table_stem}",
        {**{f"fig1a_{ext}": f"{figures}/fig1a_advantage_magnitude.{ext}" for ext in ("png", "pdf")},
         **{f"fig1b_{ext}": f"{figures}/fig1b_weight_functions.{ext}" for ext in ("png", "pdf")},
         **{f"table_{ext}": path for ext, path in _table(f"{tables}/weight_view").items()}},
        {key: theory.outputs[key] for key in ("curves", "weights", "weight_view")},
        {"group_size": config["theory"]["group_size"], "table_stem": _stem("table_csv")},
        {"fig1a_png": ("fig1a.rst", "Theory"), "fig1b_png": ("fig1b.rst", "Theory"),
         "table_md": ("weight_view.rst", "Theory")})]

    imagenet = {"curves": f"{data}/imagenet_curves.csv", "summary": f"{data}/imagenet_summary.csv"}
    steps += [
        Step("paper_imagenet_data", "pipeline_lib.paper.imagenet",
             "collect --done {input.done} --curves {output.curves} --summary {output.summary}", imagenet,
             {"done": runs_of(plan, "imagenet")}),
        Step("paper_imagenet", "pipeline_lib.paper.imagenet",
             "render --curves {input.curves} --summary {input.summary} --label {params.label:q} --png {output.png}"
             " --pdf {output.pdf} --table-stem {params.table_stem}",
             {"png": f"{figures}/imagenet_objectives.png", "pdf": f"{figures}/imagenet_objectives.pdf",
              **{f"table_{ext}": path for ext, path in _table(f"{tables}/imagenet_objectives").items()}},
             imagenet, {"label": config["imagenet"]["label"], "table_stem": _stem("table_csv")},
             {"png": ("imagenet.rst", "ImageNet objective study"),
              "table_md": ("imagenet_table.rst", "ImageNet objective study")}),
    ]

    results = "pipeline_lib.paper.results"
    paired = paired_requests(plan)
    # a data step reads each run's identity from the plan (--runs: file -> RunId), never from the file's path
    evaluated = table1_evaluations(config, plan)
    rollouts = _beside_run(paired, "rollouts.jsonl")
    # the runs that kept policies for the pass-rate probe: p by the probe (their rollouts.jsonl -> its probe.jsonl)
    probes = {f"results/train/{run.key}/rollouts.jsonl": probe_output(run) for run in probed_runs(plan)}
    # a method trained in variants (RL-Logit): Table 1's row is the variant selected on validation (variant_steps)
    selections = [f"{data}/{method}_selection.json" for method in selected_methods(config, plan)]
    steps += [
        *variant_steps(config, plan),
        Step("paper_table1_data", results,
             "table1-data --runs {params.runs_file}{params.selection_option} --out {output.csv}",
             {"csv": f"{data}/table1.csv"}, {"metrics": list(evaluated), "selections": selections},
             {"runs": run_ids_json(evaluated), "selection_option": "".join(f" --selection {p}" for p in selections)},
             files=("runs",)),
        _table_step("paper_table1", results, "table1 --data {input.csv} --label {params.label}", "table1",
                    {"csv": f"{data}/table1.csv"}, {"label": label}),
        Step("paper_gradient_allocation_data", results,
             "allocation-data --runs {params.runs_file} --probes {params.probes_file} --out {output.csv}",
             {"csv": f"{data}/gradient_allocation.csv"},
             {"done": [r.path for r in paired], "probes": list(probes.values())},
             {"runs": run_ids_json(rollouts), "probes": json.dumps(probes)}, files=("runs", "probes")),
        _table_step("paper_gradient_allocation", results, "allocation --data {input.csv} --label {params.label}",
                    "gradient_allocation", {"csv": f"{data}/gradient_allocation.csv"},
                    {"label": label}),
        Step("paper_training_curves", "pipeline_lib.paper.curves",
             "--runs {params.runs_file} --label {params.label} --png {output.png} --pdf {output.pdf}",
             {"png": f"{figures}/training_curves.png", "pdf": f"{figures}/training_curves.pdf"},
             {"done": [r.path for r in rl_requests(plan)]},
             {"runs": run_ids_json(_beside_run(rl_requests(plan), "metrics.jsonl")), "label": label},
             {"png": ("training_curves.rst", "Results")}, files=("runs",)),
    ]

    report = report_inputs(config, plan, paper_targets)
    # the demonstrations a Table 1 run generated for itself (the registry's generated_demonstrations), each with its run
    # (a run's method from the plan: a variant run's name is no method)
    method_of = {run.output: METHODS[run.method] for run in plan.runs if run.output in
                 {r.path for r in evaluated.values()}}
    demonstrations = {os.path.join(os.path.dirname(r.path), method_of[r.path].generated_demonstrations): r
                      for r in evaluated.values() if method_of[r.path].generated_demonstrations}
    # the primary judge's summaries of every judged run (report_inputs' "summaries"), each with its run
    judged = {path: run for task in judge_tasks(plan) for path, run in judged_runs(plan, "primary", task).items()}
    # what the run holds beyond Table 1, read by the report's "cannot say" lines: base models, transfer, human ratings
    made_names = {pair.split("=", 1)[0] for pair in report["made"]}
    scale_data = [f"{data}/scale.csv"] if "scale" in made_names else []
    agreements = ([f"results/judge/calibration/{task}/agreement.json" for task in judge_tasks(plan)]
                  if "judge_validation" in made_names else [])
    transfer = transfer_runs(config, plan)
    # and, for the tasks judged against their expert reference (judge.pairwise), its pairwise summaries
    pairwise = {path: run for task in judge_tasks(plan) if task in pairwise_tasks(config)
                for path, run in judged_runs(plan, "primary", task, pairwise=True).items()}
    steps += [
        Step("paper_reproduction_report", "pipeline_lib.paper.reproduction",
             "--reference {input.reference} --label {params.label} --table1 {input.table1}"
             " --allocation {input.allocation} --eval-root results/eval --rollouts {params.rollouts_file}"
             " --demonstrations {params.demonstrations_file}"
             " --judge-summaries {params.summaries_file} --made {params.made} --min-seeds {params.min_seeds}"
             " --test-data {params.test_data_file} --transfer {params.transfer_file}"
             " --agreement {params.agreement}{params.scale_option} --out {output.report}",
             {"report": "results/paper/reproduction_report.md"},
             {"reference": "config/paper_reference.yaml", "table1": f"{data}/table1.csv",
              "allocation": f"{data}/gradient_allocation.csv", "generations": report["generations"],
              "summaries": report["summaries"], "made": [pair.split("=", 1)[1] for pair in report["made"]],
              "test_data": report["test_data"], "scale_data": scale_data, "transfer": list(transfer),
              "agreement": agreements},
             {"label": label, "made": report["made"], "min_seeds": config["report"]["min_seeds"],
              "summaries": run_ids_json(judged), "test_data": json.dumps(test_splits(config)),
              "rollouts": run_ids_json(rollouts), "demonstrations": run_ids_json(demonstrations),
              "transfer": run_ids_json(transfer), "agreement": agreements,
              "scale_option": "".join(f" --scale-data {path}" for path in scale_data)},
             {"report": ("reproduction_report.rst", "Reproduction")},
             files=("summaries", "test_data", "rollouts", "demonstrations", "transfer")),
        Step("paper_audit", "pipeline_lib", "audit {input.table} --out {output.audit} --no-fail",
             {"audit": "results/paper/audit_table1.txt"}, {"table": f"{tables}/table1.tex"},
             reports={"audit": ("audit.rst", "Provenance")}, code="pipeline_lib.__main__"),
    ]

    judging, tasks = "pipeline_lib.paper.judging", judge_tasks(plan)
    # the judges' display names: drawn by the tables, kept out of judge_score's identity (judge_params)
    judge_labels = json.dumps({judge: judge_spec(config, judge)["label"] for judge in JUDGES}, sort_keys=True)
    steps += [
        _table_step("paper_nonverifiable", judging,
                    "nonverifiable --summaries {params.summaries_file} --methods {params.methods}"
                    " --transfer {params.transfer_file} --pairwise {params.pairwise_file}"
                    " --label {params.label} --judge-labels {params.judge_labels_file}", "nonverifiable",
                    {"summaries": list(judged), "pairwise": list(pairwise),
                     "transfer": list(transfer_runs(config, plan))},
                    {"methods": judge_methods(plan), "label": label,
                     "judge_labels": json.dumps({"primary": judge_spec(config, "primary")["label"]}),
                     "summaries": run_ids_json(judged), "pairwise": run_ids_json(pairwise),
                     "transfer": run_ids_json(transfer_runs(config, plan))},
                    files=("judge_labels", "summaries", "pairwise", "transfer")),
        _table_step("paper_judge_validation", judging,
                    "validation --cross {input.cross} --cross-pairwise {input.cross_pairwise}"
                    " --agreement {input.agreement} --ours {params.ours}"
                    " --label {params.label} --judge-labels {params.judge_labels_file}", "judge_validation",
                    {"cross": [cross_judge_file(task) for task in tasks],
                     "cross_pairwise": [cross_judge_file(task, True) for task in tasks
                                        if task in pairwise_tasks(config)],
                     "agreement": [f"results/judge/calibration/{task}/agreement.json" for task in tasks]},
                    {"ours": judge_ours(plan) if tasks else "", "label": label, "judge_labels": judge_labels},
                    files=("judge_labels",)),
    ]

    cells, scale_runs = ablation_cells(plan), scale_cells(config, plan)
    steps += [
        Step("paper_ablation_data", "pipeline_lib.paper.ablation",
             "data --cells {params.cells_file} --out {output.csv}", {"csv": f"{data}/ablation.csv"},
             {"metrics": list(cells)}, {"cells": json.dumps(cells)}, files=("cells",)),
        _table_step("paper_ablation", "pipeline_lib.paper.ablation",
                    "table --data {input.csv} --label {params.label}", "ablation",
                    {"csv": f"{data}/ablation.csv"}, {"label": label, "differences": json.dumps(
                        ablation_differences(plan))}, " --differences {params.differences_file}", ("differences",)),
        Step("paper_scale_data", "pipeline_lib.paper.scale", "data --cells {params.cells_file} --out {output.csv}",
             {"csv": f"{data}/scale.csv"}, {"metrics": list(scale_runs)}, {"cells": json.dumps(scale_runs)},
             files=("cells",)),
        _table_step("paper_scale", "pipeline_lib.paper.scale", "table --data {input.csv} --label {params.label}",
                    "scale", {"csv": f"{data}/scale.csv"}, {"label": label}),
    ]
    return steps + _adaptive_steps(config, plan)


def variant_steps(config: Mapping[str, Any], plan: Plan) -> list[Step]:
    """Per Table 1 method trained in variants (RL-Logit's rewards): the selection, which reads only the variants'
    evaluations on their held-out validation prompts, and the supplementary table of every variant's scores."""
    steps = []
    module, variants = "pipeline_lib.paper.variants", variant_methods(plan)
    for method in selected_methods(config, plan):
        validation = validation_evaluations(config, plan, method)
        test = {path: run for path, run in table1_evaluations(config, plan).items()
                if variants.get(run.name) == method}
        order = {name: variant for name, (_, variant) in variant_runs(config, method).items()}
        data = {task: holdout_prompts(task)["val"] for task in dict.fromkeys(r.task for r in validation.values())}
        selection = f"results/paper/data/{method}_selection.json"
        steps += [
            Step(f"paper_{method}_selection", module,
                 "select --method {params.method} --validation {params.validation_file}"
                 " --variants {params.variants_file} --data {params.data_file} --metric {params.metric}"
                 " --out {output.selection}", {"selection": selection}, {"metrics": list(validation)},
                 {"method": method, "validation": run_ids_json(validation), "variants": json.dumps(order),
                  "data": json.dumps(data), "metric": "pass@1_greedy"}, files=("validation", "variants", "data")),
            _table_step(f"paper_{method}_variants", module,
                        "table --selection {input.selection} --test {params.test_file} --label {params.label}",
                        f"{method}_variants", {"selection": selection, "metrics": list(test)},
                        {"test": run_ids_json(test), "label": config["label"]}, files=("test",)),
        ]
    return steps


def _adaptive_steps(config: Mapping[str, Any], plan: Plan) -> list[Step]:
    """Beyond the paper: adaptive temperature (softmax_ess) against fixed-tau SoftmaxGRPO and GRPO, paired over seeds
    and test prompts (:func:`~pipeline_lib.plan.targets.adaptive_comparison`; only when such a method is configured)."""
    adaptive = adaptive_comparison(config)
    if not adaptive:
        return []
    compared = rl_requests(plan, [adaptive["ours"], *adaptive["baselines"]])
    ours = rl_requests(plan, [adaptive["ours"]])
    evaluations = {r.path.replace("DONE.json", "generations.jsonl").replace("results/train/", "results/eval/"): r
                   for r in compared}
    module = "pipeline_lib.paper.adaptive"
    tables = {os.path.basename(p).replace(".", "_"): p for p in ADAPTIVE_OUTPUTS if "/tables/" in p}
    return [
        Step("paper_adaptive_tau", module,
             "compare --ours {params.ours} --baselines {params.baselines} --eval {params.evals_file}"
             " --rollouts {params.rollouts_file} --label {params.label} --stem results/paper/tables/adaptive_tau",
             tables, {"done": [r.path for r in compared], "evals": list(evaluations)},
             {"ours": adaptive["ours"], "baselines": adaptive["baselines"], "label": config["label"],
              "evals": run_ids_json(evaluations), "rollouts": run_ids_json(_beside_run(compared, "rollouts.jsonl"))},
             files=("evals", "rollouts")),
        Step("paper_adaptive_tau_data", module,
             "tau-data --rollouts {params.rollouts_file} --ess-fraction {params.ess_fraction} --out {output.csv}",
             {"csv": "results/paper/data/adaptive_tau.csv"}, {"done": [r.path for r in ours]},
             {"ess_fraction": adaptive["ess_fraction"], "rollouts": run_ids_json(_beside_run(ours, "rollouts.jsonl"))},
             files=("rollouts",)),
        Step("paper_adaptive_tau_figure", module,
             "tau-figure --data {input.csv} --label {params.label} --png {output.png} --pdf {output.pdf}",
             {"png": "results/paper/figures/adaptive_tau.png", "pdf": "results/paper/figures/adaptive_tau.pdf"},
             {"csv": "results/paper/data/adaptive_tau.csv"}, {"label": config["label"]},
             {"png": ("adaptive_tau.rst", "Results")}),
    ]


# --- the data and judge rule families' parameters -------------------------------------------------------------------

def dataset_pattern(config: Mapping[str, Any], with_reference_prompts: bool, online: bool = False) -> str:
    """The configured paper datasets whose build writes ``rl_sim_train`` (prompts with an expert answer, where the RL
    prompts have none: :data:`~pipeline_lib.plan.settings.PROMPTS_WITHOUT_REFERENCE`), or those that do not; with
    ``online``, only those whose build calls an endpoint (:func:`~pipeline_lib.plan.site.build_goes_online`), else
    only those whose does not."""
    datasets = config["data"]["datasets"]
    return pattern(name for name in datasets
                   if (name in PROMPTS_WITHOUT_REFERENCE) == with_reference_prompts
                   and build_goes_online(datasets[name]) == online)


def data_params(config: Mapping[str, Any], family: str) -> dict[str, Any]:
    """Parameters of a data rule (``tiny``, ``build``, ``tokenizer``, ``imagenet``, ``holdout``), per wildcard where
    they vary."""
    out_dir = {"out_dir": lambda wildcards, output: os.path.dirname(output.manifest)}
    if family == "tiny":
        weights = config["data"]["tiny"]["reward_weights"]
        return {"spec": json.dumps(tiny_task_spec(config)), "seed": config["seed"], **out_dir,
                "weights": lambda wildcards: json.dumps(weights.get(wildcards.task))}
    if family == "build":
        from pipeline_lib.core.data.real import source_files, sources_digest  # pandas: only a plan with builds

        datasets = config["data"]["datasets"]
        # the raw files' content is a parameter: a same-size or mtime-restored replacement plans the build again
        return {"spec": lambda wildcards: json.dumps(datasets[wildcards.dataset]), **out_dir,
                "sources": lambda wildcards: sources_digest(source_files(datasets[wildcards.dataset]))}
    if family == "tokenizer":
        return {"vocab_size": config["data"]["tokenizer"]["vocab_size"], **out_dir}
    if family == "imagenet":
        return {"spec": json.dumps(config["imagenet"]), **out_dir}
    if family == "holdout":  # one split per task, shared by every method that selects a variant on it
        held = {((config["train"].get("baselines") or {}).get(m.section or m.name) or {}).get("validation_prompts")
                for m in METHODS.values() if m.variants}
        held.discard(None)
        if len(held) > 1:
            raise ValueError(f"the methods with variants hold out different validation_prompts {sorted(held)}; they "
                             "share one split per task (results/data/<task>/holdout/)")
        return {"validation_prompts": held.pop() if held else 0,
                "out_dir": lambda wildcards, output: os.path.dirname(output.train)}
    raise ValueError(f"unknown data rule family {family!r}")


def eval_params(config: Mapping[str, Any], family: str) -> dict[str, Any]:
    """Parameters of an evaluation rule of one checkpoint (``checkpoint``, ``validation``, ``lm_eval``,
    ``alpaca_eval``)."""
    model = {"model": lambda wildcards, input: os.path.join(os.path.dirname(input.done), "final")}
    if family in ("checkpoint", "validation"):  # the test split, or a variant run's held-out validation prompts
        return {"spec": lambda wildcards: json.dumps(eval_spec(config, wildcards.task)), **model,
                "out_dir": lambda wildcards, output: os.path.dirname(output.metrics)}
    if family in ("lm_eval", "alpaca_eval"):
        settings = dict(config["eval"]["transfer"][family])
        if family == "alpaca_eval" and not settings.get("instructions"):  # AlpacaEval's own, fetched from the hub
            settings["instructions_hub"] = {"repo": ALPACA_EVAL_REPO, "file": ALPACA_EVAL_INSTRUCTIONS}
        spec = {"spec": json.dumps(settings)}
        return {**spec, **({"eval_spec": json.dumps(eval_spec(config))} if family == "alpaca_eval" else {}), **model}
    raise ValueError(f"unknown evaluation rule family {family!r}")


def judge_inputs(plan: Plan, family: str) -> dict[str, Callable[[Any], list[str]]]:
    """Input functions of a judge rule of one task (``cross``, ``calibration``): the judged runs' files, read off the
    plan's judge study."""
    if family in ("cross", "cross_pairwise"):
        pairwise = family == "cross_pairwise"
        return {judge: lambda wildcards, judge=judge: list(judged_runs(plan, judge, wildcards.task, pairwise))
                for judge in JUDGES}
    if family == "calibration":
        return {"scores": lambda wildcards: list(judge_score_runs(plan, wildcards.task))}
    raise ValueError(f"unknown judge rule family {family!r}")


def calibration_pairwise_inputs(config: Mapping[str, Any], plan: Plan) -> Callable[[Any], list[str]]:
    """The calibration import's pairwise inputs: the primary judge's scores against the expert reference, for a
    task judged pairwise (``judge.pairwise``), else nothing (a task judged in isolation only reads as before)."""
    pairwise = pairwise_tasks(config)
    return lambda wildcards: list(judge_score_runs(plan, wildcards.task, True)) if wildcards.task in pairwise else []


def judge_params(config: Mapping[str, Any], plan: Plan, family: str) -> dict[str, Any]:
    """Parameters of a judge rule (``score``, ``pairwise``, ``cross``, ``cross_pairwise``, ``export``, ``import``),
    per wildcard where they vary."""
    rubric: Callable[[Any], str] = lambda wildcards: judge_rubric(config, wildcards.task)  # noqa: E731
    calibration = config["judge"]["calibration"]
    if family == "pairwise":  # the same judge, cache and mode; the task's pairwise rubric against its reference
        return {**judge_params(config, plan, "score"),
                "rubric": lambda wildcards: pairwise_tasks(config)[wildcards.task]}
    if family == "score":
        # a judge's label is a display name: the command gets it (derived from the output, so not compared), the
        # rule's identity does not, so relabelling a judge rescores nothing (the tables draw the labels: judge_labels)
        return {"judge": lambda wildcards, output: json.dumps(judge_spec(config, wildcards.judge)),
                "identity": lambda wildcards: json.dumps({k: v for k, v in judge_spec(config, wildcards.judge).items()
                                                          if k != "label"}, sort_keys=True), "rubric": rubric,
                "mode": config["judge"]["mode"],
                "cache": lambda wildcards: f"results/judge/cache/{wildcards.judge}.sqlite",
                "out_dir": lambda wildcards, output: os.path.dirname(output.summary)}
    # the judged runs' files of one task, each with its run (the entry points read a run's identity from there)
    scores = {"scores": lambda wildcards: run_ids_json(judge_score_runs(plan, wildcards.task))}
    if family in ("cross", "cross_pairwise"):
        pairwise = family == "cross_pairwise"
        return {"methods": judge_methods(plan),
                **{judge: lambda wildcards, judge=judge: run_ids_json(judged_runs(plan, judge, wildcards.task,
                                                                                  pairwise))
                   for judge in JUDGES}}
    if family == "export":
        return {"rubric": rubric, "size": calibration["items_per_task"], "seed": calibration["seed"],
                "out_dir": lambda wildcards, output: os.path.dirname(output.sheet), **scores}
    if family == "import":
        pairwise = pairwise_tasks(config)
        return {"rubric": rubric, "ratings": lambda wildcards: calibration["ratings"].get(wildcards.task) or "",
                **scores, "pairwise_scores": lambda wildcards: run_ids_json(
                    judge_score_runs(plan, wildcards.task, True) if wildcards.task in pairwise else {})}
    raise ValueError(f"unknown judge rule family {family!r}")


