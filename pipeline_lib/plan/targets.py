"""Target lists for the Snakefile's named targets (``all``, ``data``, ``train``...), read off the run plan.

Which runs exist is decided in :func:`pipeline_lib.plan.plan_runs`; here each stage's final outputs are listed
(evaluations, judge scores, tables) for the runs the plan's studies read, in table order.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pipeline_lib.core.cli import json_value
from pipeline_lib.core.data.tiny import TASKS as TINY_TASKS
from pipeline_lib.plan import METHODS, Plan, PlanError, Run, RunId, plan_runs, trained_methods
from pipeline_lib.plan.judges import JUDGES, pairwise_tasks
from pipeline_lib.plan.layouts import final_dir
from pipeline_lib.plan.runs import TOKENIZER, key_pattern
from pipeline_lib.plan.settings import holdout_prompts, probe_spec

__all__ = ["ABLATION_OUTPUTS", "ADAPTIVE_OUTPUTS", "IMAGENET_OUTPUTS", "JUDGE_TABLES", "PAIRWISE_DIR", "PROBE_ROOT",
           "SCALE_OUTPUTS", "STAGES", "THEORY_OUTPUTS", "VALIDATION_DIR", "ablation_cells", "adaptive_comparison",
           "cross_judge_file", "data_targets", "eval_targets", "evaluated_runs", "holdout_tasks", "judge_methods",
           "judge_ours", "judge_score_runs", "judge_targets", "judge_tasks", "judged_runs", "paired_requests",
           "probe_inputs", "probe_output", "probe_pattern", "probe_run_spec", "probe_seed", "probe_start_model",
           "probed_runs", "read_run_ids", "reads_tokenizer", "report_inputs", "requests_of", "rl_requests",
           "run_ids_argument", "run_ids_json", "runs_of", "scale_cells", "selected_methods", "stage_targets",
           "study_evaluations", "table1_evaluations", "table1_tasks", "test_splits", "tokenizer_inputs",
           "transfer_runs", "validation_evaluations", "variant_methods", "variant_outputs"]

STAGES = ("data", "train", "eval", "judge", "paper")


def _tables(*names: str) -> tuple[str, ...]:
    return tuple(f"results/paper/tables/{name}.{ext}" for name in names for ext in ("tex", "md", "csv"))


def _figures(*names: str) -> tuple[str, ...]:
    return tuple(f"results/paper/figures/{name}.{ext}" for name in names for ext in ("png", "pdf"))


THEORY_OUTPUTS = ("results/paper/theory_verification.md", "results/paper/theory_verification.json",
                  *_figures("fig1a_advantage_magnitude", "fig1b_weight_functions"), *_tables("weight_view"))
IMAGENET_OUTPUTS = (*_figures("imagenet_objectives"), *_tables("imagenet_objectives"))
#: The adaptive-temperature study (softmax_ess against fixed-tau SoftmaxGRPO and GRPO, beyond the paper).
ADAPTIVE_OUTPUTS = (*_tables("adaptive_tau", "adaptive_tau_allocation"), "results/paper/data/adaptive_tau.csv",
                    *_figures("adaptive_tau"))
JUDGE_TABLES = _tables("nonverifiable", "judge_validation")
ABLATION_OUTPUTS = _tables("ablation")
SCALE_OUTPUTS = _tables("scale")
PAPER_RESULT_OUTPUTS = (*_tables("table1", "gradient_allocation"), *_figures("training_curves"),
                        "results/paper/reproduction_report.md", "results/paper/audit_table1.txt")


def adaptive_comparison(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The adaptive-tau comparison: ``ours`` (the ``softmax_ess`` method), ``baselines`` (fixed-tau SoftmaxGRPO and
    GRPO with the same reward) and its ``ess_fraction``; None where there is nothing to compare."""
    methods = config.get("train", {}).get("methods", {})
    ours = [name for name, spec in methods.items() if spec["advantage"] == "softmax_ess"]
    if not ours:
        return None
    if len(ours) > 1:
        raise ValueError(f"train.methods: one softmax_ess method is compared at a time, got {ours}")
    reward = methods[ours[0]]["reward"]
    baselines = [name for name, spec in methods.items()
                 if spec["advantage"] in ("softmax", "grpo") and spec["reward"] == reward]
    if not baselines:
        return None
    return {"ours": ours[0], "baselines": baselines, "ess_fraction": methods[ours[0]]["ess_fraction"]}


def reads_tokenizer(plan: Plan) -> bool:
    """Whether some run reads the pipeline's own tokenizer (a plan of pretrained models builds neither it nor the
    tiny tasks it is trained on)."""
    return any(path == TOKENIZER for run in plan.runs for path in run.inputs.values())


def tokenizer_inputs(config: Mapping[str, Any]) -> list[str]:
    """What the tokenizer is trained on: every tiny task's SFT and RL prompts."""
    return [f"results/data/{task}/{split}.parquet" for split in ("sft_train", "rl_train")
            for task in config["data"]["tiny"]["tasks"]]


def data_targets(config: Mapping[str, Any], plan: Plan) -> list[str]:
    """The tiny tasks and the tokenizer (where the plan reads it), the enabled paper datasets and ImageNet's."""
    data = config["data"]
    targets = []
    if reads_tokenizer(plan):
        targets += [f"results/data/{task}/manifest.json" for task in data["tiny"]["tasks"]]
        targets.append("results/data/tokenizer/manifest.json")
    targets += [f"results/data/{name}/manifest.json" for name, spec in data["datasets"].items() if spec.get("enabled")]
    imagenet = config.get("imagenet", {})
    if imagenet.get("enabled") and imagenet.get("dataset", {}).get("kind") == "imagefolder":
        targets.append("results/data/imagenet/manifest.json")
    return targets


def _evaluations(sentinels: list[str]) -> list[str]:
    return [p.replace("results/train/", "results/eval/").replace("DONE.json", "metrics.json") for p in sentinels]


def study_evaluations(plan: Plan, *studies: str) -> list[str]:
    """The evaluations of the runs ``studies`` read, study by study in their tables' order."""
    return [path for study in studies for path in _evaluations(runs_of(plan, study))]


def requests_of(plan: Plan, study: str, methods: Collection[str] | None = None) -> list[RunId]:
    """The runs one study reads (named one of ``methods`` only, where given), in its tables' order."""
    return [r for r in plan.requests.get(study, []) if methods is None or r.name in methods]


def runs_of(plan: Plan, study: str, methods: list[str] | None = None) -> list[str]:
    """Sentinels of the runs one study reads (of ``methods`` only, where given), e.g. the main RL runs."""
    return [r.path for r in requests_of(plan, study, methods)]


def rl_requests(plan: Plan, methods: list[str] | None = None) -> list[RunId]:
    """The main RL runs (of ``methods`` only, where given), without the SFT runs they start from."""
    return [r for r in requests_of(plan, "main", methods) if not METHODS[r.name].starting_point]


def paired_requests(plan: Plan) -> list[RunId]:
    """The main RL runs of the paper's pair (the gradient-allocation table): ours with the verifier reward, and GRPO
    with the same reward."""
    ours = [m for m in METHODS.values() if m.ours and m.reward == "verifier"]
    pair = {m.name for m in METHODS.values() if m.family == "group_rl" and any(
        m is o or (m.advantage == "grpo" and m.reward == o.reward) for o in ours)}
    return [r for r in requests_of(plan, "main", pair) if not METHODS[r.name].starting_point]


#: Where a run's pass-rate probe lies: ``results/probe/<task>/<run>/seed<k>/`` (:mod:`pipeline_lib.jobs.eval.probe`).
PROBE_ROOT = "results/probe"


def probed_runs(plan: Plan) -> list[Run]:
    """The paired RL runs (:func:`paired_requests`) that kept policies for the pass-rate probe
    (``train.rl.probe_every``): the gradient-allocation table measures their groups' p by the probe."""
    paths = {r.path for r in paired_requests(plan)}
    return [run for run in plan.runs if f"results/train/{run.key}/DONE.json" in paths and run.spec.rl is not None
            and run.spec.rl.probe_every is not None]


def probe_output(run: Run) -> str:
    """A probed run's ``probe.jsonl``."""
    return f"{PROBE_ROOT}/{run.key}/probe.jsonl"


def _probed(plan: Plan, key: str) -> Run:
    runs = {run.key: run for run in probed_runs(plan)}
    if key not in runs:
        raise PlanError(f"{key}: not a paired RL run that keeps policies for the pass-rate probe")
    return runs[key]


def probe_pattern(plan: Plan) -> str:
    """A wildcard constraint matching exactly the probed runs' keys (none: a pattern that matches nothing)."""
    return key_pattern(run.key for run in probed_runs(plan))


def probe_inputs(plan: Plan, key: str) -> dict[str, Any]:
    """The probe rule's inputs of one run: its training prompts and the sentinel of the run it started from (an empty
    list where it started from its spec's hub model, which the job then reads after `fetch`)."""
    run = _probed(plan, key)
    return {"data": run.inputs["data"], "init": [run.inputs["init"]] if run.inputs.get("init") else []}


def probe_start_model(plan: Plan, key: str) -> str:
    """The first window's policy: the model the run started from (``final/`` beside its sentinel, or its hub id)."""
    run = _probed(plan, key)
    return final_dir(run.inputs["init"]) if run.inputs.get("init") else str(run.spec.model)


def probe_run_spec(config: Mapping[str, Any], plan: Plan, key: str) -> dict[str, Any]:
    """The probe of one run (:func:`pipeline_lib.plan.settings.probe_spec`)."""
    return probe_spec(config, _probed(plan, key).spec)


def probe_seed(plan: Plan, key: str) -> int:
    return _probed(plan, key).seed


#: Where a run's validation evaluation lies, beside its test one: ``results/eval/<task>/<run>/seed<k>/validation/``.
VALIDATION_DIR = "validation"


def variant_methods(plan: Plan) -> dict[str, str]:
    """Each variant run's name -> its method (the plan's runs of a method with variants: RL-Logit's reward variants)."""
    return {run.name: run.method for run in plan.runs
            if run.name != run.method and run.method in METHODS and METHODS[run.method].variants}


def validation_evaluations(config: Mapping[str, Any], plan: Plan, method: str | None = None) -> dict[str, RunId]:
    """Each Table 1 variant run's evaluation on its held-out validation prompts -> the run (of ``method``'s variants
    only, where given): what the selection of Table 1's variant reads, and nothing of the test split."""
    variants = variant_methods(plan)
    return {path.replace("/metrics.json", f"/{VALIDATION_DIR}/metrics.json"): run
            for path, run in table1_evaluations(config, plan).items()
            if run.name in variants and (method is None or variants[run.name] == method)}


def holdout_tasks(plan: Plan) -> list[str]:
    """Tasks whose training prompts some run reads with a validation part held out (rule ``data_holdout``)."""
    return list(dict.fromkeys(run.task for run in plan.runs if holdout_prompts(run.task)["train"] in
                              run.inputs.values()))


def _table1_requests(plan: Plan) -> list[RunId]:
    """The runs Table 1 reads: SFT and the RL methods on ``train.tasks``, the baselines on theirs (each run once)."""
    main = requests_of(plan, "main")
    paths = {r.path for r in main}
    return main + [r for r in requests_of(plan, "baseline") if r.path not in paths]


def eval_targets(plan: Plan) -> list[str]:
    """Every evaluation Table 1 reads: SFT and the RL methods on ``train.tasks``, the baselines on theirs."""
    return _evaluations([r.path for r in _table1_requests(plan)])


def selected_methods(config: Mapping[str, Any], plan: Plan) -> list[str]:
    """The Table 1 methods whose reported row is a variant selected on validation (RL-Logit), in table order."""
    variants = variant_methods(plan)
    return list(dict.fromkeys(variants[r.name] for r in table1_evaluations(config, plan).values()
                              if r.name in variants))


def variant_outputs(method: str) -> tuple[str, ...]:
    """What the selection of ``method``'s variant writes: the selection record and the supplementary table."""
    return (f"results/paper/data/{method}_selection.json", *_tables(f"{method}_variants"))


def table1_tasks(config: Mapping[str, Any]) -> list[str]:
    """Table 1's columns: the tasks some verifier-reward method trains on (the others are the non-verifiable
    table's)."""
    methods = config["train"]["methods"]
    return [task for task in config["train"]["tasks"]
            if any(methods[m]["reward"] == "verifier" for m in trained_methods(config, task))]


def table1_evaluations(config: Mapping[str, Any], plan: Plan) -> dict[str, RunId]:
    """The evaluations Table 1 reads, each with its run."""
    tasks = set(table1_tasks(config))
    return evaluated_runs([r for r in _table1_requests(plan) if r.task in tasks])


def evaluated_runs(ids: Iterable[RunId]) -> dict[str, RunId]:
    """Each run's evaluation -> the run: a paper step reads a run's task, name and seed from these fields, never from
    its files' paths."""
    ids = list(ids)
    return dict(zip(_evaluations([r.path for r in ids]), ids, strict=True))


def run_ids_json(files: Mapping[str, RunId]) -> str:
    """``files`` (a file a step reads -> its run) as a paper step's ``--runs`` JSON."""
    return json.dumps({path: dataclasses.asdict(run) for path, run in files.items()})


def read_run_ids(value: Mapping[str, Mapping[str, Any]]) -> dict[str, RunId]:
    """The parsed JSON of :func:`run_ids_json` back as file -> :class:`RunId`; a record without a field names it."""
    fields = {f.name for f in dataclasses.fields(RunId)}
    out = {}
    for path, record in value.items():
        if not isinstance(record, Mapping) or set(record) != fields:
            raise ValueError(f"--runs: the record of {path!r} must have exactly the fields {sorted(fields)}, got "
                             f"{sorted(record) if isinstance(record, Mapping) else record!r}")
        out[path] = RunId(**record)
    return out


def run_ids_argument(value: str) -> dict[str, RunId]:
    """An argparse ``type``: a ``--runs`` file (or inline JSON) as file -> :class:`RunId` (:func:`run_ids_json`)."""
    try:
        return read_run_ids(json_value(value))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def judge_tasks(plan: Plan) -> list[str]:
    return list(dict.fromkeys(r.task for r in requests_of(plan, "judge")))


def judge_methods(plan: Plan) -> list[str]:
    """The judged methods in table order: the non-verifiable table's rows."""
    return list(dict.fromkeys(r.name for r in requests_of(plan, "judge")))


#: Where a judged run's pairwise scores (against the expert reference: ``judge.pairwise``) lie, beside its isolated
#: ones.
PAIRWISE_DIR = "pairwise"


def judged_runs(plan: Plan, judge: str, task: str, pairwise: bool = False) -> dict[str, RunId]:
    """Every judged run's summary of ``task`` under one judge -> the run, in table order (method, then seed);
    ``pairwise``: its score against the expert reference (``.../seed<k>/pairwise/summary.json``)."""
    sub = f"{PAIRWISE_DIR}/" if pairwise else ""
    return {f"results/judge/{judge}/{r.task}/{r.name}/seed{r.seed}/{sub}summary.json": r
            for r in requests_of(plan, "judge") if r.task == task}


def judge_ours(plan: Plan) -> str:
    """The method the validation table reports judge scores for: the first judged method of ours (SoftmaxGRPO)."""
    methods = judge_methods(plan)
    return next((m for m in methods if m in METHODS and METHODS[m].ours), methods[-1])


def transfer_runs(config: Mapping[str, Any], plan: Plan) -> dict[str, RunId]:
    """lm-eval / AlpacaEval results of the transfer study's checkpoints, per enabled benchmark -> the run."""
    transfer = config["eval"].get("transfer") or {}
    benchmarks = [name for name in ("lm_eval", "alpaca_eval") if transfer.get(name, {}).get("enabled")]
    return {r.path.replace("results/train/", "results/eval/transfer/").replace("DONE.json", f"{benchmark}.json"): r
            for benchmark in benchmarks for r in requests_of(plan, "transfer")}


def judge_score_runs(plan: Plan, task: str, pairwise: bool = False) -> dict[str, RunId]:
    """The primary judge's per-item scores of every judged run (what calibration samples and correlates) -> the run;
    ``pairwise``: those against the expert reference."""
    summaries = judged_runs(plan, "primary", task, pairwise)
    return {path.replace("summary.json", "scores.jsonl"): run for path, run in summaries.items()}


def cross_judge_file(task: str, pairwise: bool = False) -> str:
    """The cross-judge agreement of a task's isolated scores, or of its pairwise ones."""
    return f"results/judge/cross/{PAIRWISE_DIR}/{task}.json" if pairwise else f"results/judge/cross/{task}.json"


def judge_targets(plan: Plan, pairwise: Collection[str] = ()) -> list[str]:
    """Every judge output: each judge's scores of every judged run, the cross-judge agreement and the calibration;
    the same scores against the expert reference and their agreement for the tasks in ``pairwise``."""
    targets = []
    for task in judge_tasks(plan):
        for judge in JUDGES:
            targets += list(judged_runs(plan, judge, task))
            if task in pairwise:
                targets += list(judged_runs(plan, judge, task, pairwise=True))
        targets += [cross_judge_file(task), *([cross_judge_file(task, True)] if task in pairwise else []),
                    f"results/judge/calibration/{task}/rate.html", f"results/judge/calibration/{task}/agreement.json"]
    return targets


def ablation_cells(plan: Plan) -> dict[str, dict[str, Any]]:
    """Each ablation evaluation -> its cell (task, seed, tau and M, from its spec), never parsed from the run's name."""
    runs = {run.output: run for run in plan.runs}
    cells = {}
    for metrics, request in evaluated_runs(requests_of(plan, "ablation")).items():
        spec = runs[request.path].spec
        if spec.estimator is None or "tau" not in spec.estimator.params or spec.rl is None:
            raise PlanError(f"ablation run {request.path}: no estimator tau or group size in its spec")
        cells[metrics] = {"task": request.task, "seed": request.seed, "tau": spec.estimator.params["tau"],
                          "M": spec.rl.group_size}
    return cells


def scale_cells(config: Mapping[str, Any], plan: Plan) -> dict[str, dict[str, Any]]:
    """Each evaluation the scale table reads -> its cell (task, seed, method and the model's label), from the
    config's scale models and methods, never parsed from a run's name."""
    scale = config["train"].get("scale") or {}
    at_scale = {f"{method}_at_{name}": (method, model.get("label", name))
                for name, model in (scale.get("models") or {}).items() for method in scale.get("methods") or []}
    cells = {metrics: {"task": r.task, "seed": r.seed, "method": r.name, "model": scale.get("label")}
             for metrics, r in evaluated_runs(requests_of(plan, "scale_reference")).items()}
    for metrics, r in evaluated_runs(requests_of(plan, "scale")).items():
        if r.name not in at_scale:
            raise PlanError(f"scale run {r.path}: not one of train.scale's methods at one of its models")
        method, label = at_scale[r.name]
        cells[metrics] = {"task": r.task, "seed": r.seed, "method": method, "model": label}
    return cells


def stage_targets(config: Mapping[str, Any], plan: Plan | None = None) -> dict[str, list[str]]:
    """Final outputs per stage, plus ``all`` = every stage's targets in order."""
    plan = plan or plan_runs(config)
    targets: dict[str, list[str]] = {stage: [] for stage in STAGES}
    targets["data"] += data_targets(config, plan)
    targets["paper"] += THEORY_OUTPUTS
    targets["train"] += plan.train_targets
    if config.get("train", {}).get("tasks"):
        targets["eval"] += eval_targets(plan)
        targets["paper"] += PAPER_RESULT_OUTPUTS
        selected = selected_methods(config, plan)
        if selected:  # a method with variants: each variant on its validation prompts, the selection, the other rows
            targets["eval"] += list(validation_evaluations(config, plan))
            targets["paper"] += [path for method in selected for path in variant_outputs(method)]
    if config.get("train", {}).get("tasks") and adaptive_comparison(config):
        targets["paper"] += ADAPTIVE_OUTPUTS
    if plan.requests.get("ablation"):
        targets["eval"] += study_evaluations(plan, "ablation")
        targets["paper"] += ABLATION_OUTPUTS
    if plan.requests.get("scale"):
        targets["eval"] += study_evaluations(plan, "scale_reference", "scale")
        targets["paper"] += SCALE_OUTPUTS
    if plan.requests.get("judge"):
        targets["eval"] += study_evaluations(plan, "judge")
        targets["judge"] += judge_targets(plan, pairwise_tasks(config))
        targets["paper"] += JUDGE_TABLES
    targets["eval"] += list(transfer_runs(config, plan))
    if plan.requests.get("imagenet"):
        targets["paper"] += IMAGENET_OUTPUTS
    targets["all"] = [path for stage in STAGES for path in targets[stage]]
    return targets


#: Tables the reproduction report recognises as made (name -> markdown), when this run's targets include them.
REPORTED_TABLES = ("nonverifiable", "judge_validation", "ablation", "scale", "adaptive_tau")


def report_inputs(config: Mapping[str, Any], plan: Plan, paper_targets: list[str]) -> dict[str, list[str]]:
    """What the reproduction report reads besides Table 1's data: per-prompt generations and the primary judge's
    summaries (paired intervals), the other tables this run makes (``NAME=PATH``) and the tiny tasks' test splits
    (the planted blind spot)."""
    generations = [p.replace("metrics.json", "generations.jsonl") for p in table1_evaluations(config, plan)] \
        if config.get("train", {}).get("tasks") else []
    summaries = [path for task in judge_tasks(plan) for path in judged_runs(plan, "primary", task)]
    made = [f"{name}=results/paper/tables/{name}.md" for name in REPORTED_TABLES
            if f"results/paper/tables/{name}.md" in paper_targets]
    return {"generations": generations, "summaries": summaries, "made": made,
            "test_data": list(test_splits(config).values())}


def test_splits(config: Mapping[str, Any]) -> dict[str, str]:
    """The tiny tasks' test splits, task -> ``rl_test.parquet``: the reproduction report's ``--test-data``."""
    tasks = [*(config.get("train", {}).get("tasks") or []), *(config.get("judge", {}).get("tasks") or [])]
    return {task: f"results/data/{task}/rl_test.parquet" for task in dict.fromkeys(tasks) if task in TINY_TASKS}
