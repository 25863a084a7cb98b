"""Target lists for the Snakefile's named targets (``all``, ``data``, ``train``...).

Built here, not in ``common.smk``, so they are plain tested Python. Each stage's
issue extends :func:`stage_targets` with the outputs its rules make.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ABLATION_OUTPUTS",
    "BASELINES",
    "IMAGENET_OUTPUTS",
    "JUDGES",
    "JUDGE_TABLES",
    "PROMPTS_WITHOUT_REFERENCE",
    "SCALE_OUTPUTS",
    "STAGES",
    "THEORY_OUTPUTS",
    "ablation_eval_targets",
    "ablation_method",
    "ablation_run_spec",
    "ablation_runs",
    "ablation_tau",
    "base_init",
    "baseline_eval_targets",
    "baseline_runs",
    "baseline_spec",
    "baseline_tasks",
    "baseline_train_data",
    "calibration_ratings",
    "data_targets",
    "eval_spec",
    "eval_targets",
    "generation_spec",
    "imagenet_run_spec",
    "imagenet_runs",
    "judge_concurrency",
    "judge_eval_targets",
    "judge_ours",
    "judge_rubric",
    "judge_score_files",
    "judge_seeds",
    "judge_spec",
    "judge_summaries",
    "judge_targets",
    "local_task_pattern",
    "opd_teacher",
    "opd_teacher_spec",
    "reference_prompts",
    "rl_run_spec",
    "rl_runs",
    "rl_train_data",
    "scale_config",
    "scale_eval_targets",
    "scale_runs",
    "sft_run_spec",
    "softmax_exact_method",
    "stage_targets",
    "table1_eval_targets",
    "table1_methods",
    "table1_tasks",
    "tiny_task_spec",
    "trained_methods",
    "transfer_targets",
    "validate_judges",
    "verl_ablation_spec",
    "verl_tasks",
]

STAGES = ("data", "train", "eval", "judge", "paper")

THEORY_OUTPUTS = (
    "results/paper/theory_verification.md",
    "results/paper/theory_verification.json",
    "results/paper/figures/fig1a_advantage_magnitude.png",
    "results/paper/figures/fig1a_advantage_magnitude.pdf",
    "results/paper/figures/fig1b_weight_functions.png",
    "results/paper/figures/fig1b_weight_functions.pdf",
    "results/paper/tables/weight_view.tex",
    "results/paper/tables/weight_view.md",
    "results/paper/tables/weight_view.csv",
)


IMAGENET_OUTPUTS = (
    "results/paper/figures/imagenet_objectives.png",
    "results/paper/figures/imagenet_objectives.pdf",
    "results/paper/tables/imagenet_objectives.tex",
    "results/paper/tables/imagenet_objectives.md",
    "results/paper/tables/imagenet_objectives.csv",
)


def imagenet_runs(section: Mapping[str, Any]) -> list[str]:
    """DONE sentinels of every objective-study run; ML has no rollouts and runs once per seed (``m0``)."""
    runs = []
    for objective in section["objectives"]:
        for rollouts in [0] if objective == "ml" else section["rollouts"]:
            runs += [f"results/train/imagenet/{objective}/m{rollouts}/seed{seed}/DONE.json"
                     for seed in section["seeds"]]
    return runs


#: Keys of the ``imagenet`` section that choose *which* runs exist, not how one run trains;
#: they stay out of a run's parameters so adding a seed or an M does not rerun the others.
IMAGENET_SWEEP_KEYS = ("enabled", "label", "objectives", "rollouts", "seeds")


def imagenet_run_spec(section: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in section.items() if key not in IMAGENET_SWEEP_KEYS}


def tiny_task_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    """What generates one tiny task: the ``data.tiny`` section minus the task list and reward weights."""
    return {k: v for k, v in config["data"]["tiny"].items() if k not in ("tasks", "reward_weights")}


def data_targets(config: Mapping[str, Any]) -> list[str]:
    data = config["data"]
    targets = [f"results/data/{task}/manifest.json" for task in data["tiny"]["tasks"]]
    targets.append("results/data/tokenizer/manifest.json")
    targets += [f"results/data/{name}/manifest.json" for name, spec in data["datasets"].items() if spec.get("enabled")]
    imagenet = config.get("imagenet", {})
    if imagenet.get("enabled") and imagenet.get("dataset", {}).get("kind") == "imagefolder":
        targets.append("results/data/imagenet/manifest.json")
    return targets


def sft_run_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    return {**config["train"]["sft"], "model": config["train"]["model"]}


def rl_run_spec(config: Mapping[str, Any], method: str) -> dict[str, Any]:
    """The shared RL settings plus one method's advantage and reward: paired methods differ in nothing else."""
    if method not in config["train"]["methods"]:
        raise ValueError(f"unknown method {method!r}; configured: {sorted(config['train']['methods'])}")
    spec = config["train"]["methods"][method]
    return {**config["train"]["rl"], "advantage": spec["advantage"],
            "advantage_params": {"tau": spec["tau"]} if "tau" in spec else {},
            "reward_weights": {"similarity": 1.0} if spec["reward"] == "similarity" else None}


#: Datasets whose RL prompts carry no expert answer; their prompts with one are ``rl_sim_train`` (Countdown: the
#: GOLD prompts, which have reference solutions).
PROMPTS_WITHOUT_REFERENCE = ("countdown",)


def reference_prompts(task: str) -> str:
    """RL prompts that carry an expert answer (``extra_info.reference``)."""
    kind = "rl_sim_train" if task in PROMPTS_WITHOUT_REFERENCE else "rl_train"
    return f"results/data/{task}/{kind}.parquet"


def rl_train_data(config: Mapping[str, Any], task: str, method: str) -> str:
    """Similarity-reward runs need the expert answer of every prompt; verifier runs train on all prompts."""
    if config["train"]["methods"][method]["reward"] == "similarity":
        return reference_prompts(task)
    return f"results/data/{task}/rl_train.parquet"


def baseline_train_data(task: str, method: str) -> str:
    """RL-Logit, RARO and Iterative DPO use the expert answer of every prompt, so they train on prompts that have
    one (on Countdown the GOLD prompts: its other RL prompts have no demonstration to prefer or score)."""
    return (reference_prompts(task) if method in ("rl_logit", "raro", "iterative_dpo")
            else f"results/data/{task}/rl_train.parquet")


def generation_spec(config: Mapping[str, Any], method: str, batch_key: str = "batch_size") -> dict[str, Any]:
    """How a baseline generates on its GPU path: the evaluation backend and engine settings (:func:`eval_spec`)
    with the method's own length, temperature, batch (``batch_key``) and, where set, backend."""
    own = config["train"]["baselines"][method]
    return {**eval_spec(config), "backend": own.get("backend") or config["eval"]["backend"],
            "max_new_tokens": own["max_new_tokens"], "temperature": own["temperature"], "batch_size": own[batch_key]}


def table1_methods(config: Mapping[str, Any]) -> list[str]:
    return ["sft", *config["train"]["methods"]]


def eval_targets(config: Mapping[str, Any]) -> list[str]:
    """Every evaluation Table 1 reads: SFT and the RL methods on ``train.tasks``, the baselines on theirs."""
    train = config["train"]
    main = [f"results/eval/{task}/{method}/seed{seed}/metrics.json"
            for task in train["tasks"] for method in ["sft", *trained_methods(config, task)]
            for seed in train["seeds"]]
    return main + [path for path in baseline_eval_targets(config) if path not in main]


def table1_tasks(config: Mapping[str, Any]) -> list[str]:
    """Table 1's columns: the verifiable tasks, i.e. those some verifier-reward method trains on.

    The paper's non-verifiable tasks (Poetry, MeetingBank, OpenThoughts) train only the -Sim pair and are reported in
    the non-verifiable table instead.
    """
    methods = config["train"]["methods"]
    return [task for task in config["train"]["tasks"]
            if any(methods[m]["reward"] == "verifier" for m in trained_methods(config, task))]


def table1_eval_targets(config: Mapping[str, Any]) -> list[str]:
    """The evaluations Table 1 reads (every evaluation of ``eval_targets`` on a Table 1 task)."""
    tasks = set(table1_tasks(config))
    return [path for path in eval_targets(config) if path.split("/")[2] in tasks]


def verl_tasks(config: Mapping[str, Any]) -> list[str]:
    """Tasks trained on verl: with ``train.engine: verl``, those with a ``train.verl.tasks`` entry (App. B settings).

    Any other task (e.g. a tiny analogue a paper config inherits from config/config.yaml through Snakemake's
    config merge) stays on the local engine.
    """
    train = config["train"]
    return list(train.get("verl", {}).get("tasks", {})) if train.get("engine") == "verl" else []


def local_task_pattern(config: Mapping[str, Any]) -> str:
    """Wildcard constraint of the local engine's rules: every task name except the verl tasks."""
    excluded = verl_tasks(config)
    # The excluded name must end the wildcard (not be followed by a name character): `countdown` is excluded,
    # `countdown_tiny` is not. `$` cannot be used: the wildcard sits inside the whole path's regex.
    return f"(?!(?:{'|'.join(excluded)})(?![a-z0-9_]))[a-z0-9_]+" if excluded else "[a-z0-9_]+"


def trained_methods(config: Mapping[str, Any], task: str) -> list[str]:
    """RL methods trained on ``task``: every ``train.methods`` entry, or on a verl task its own list
    (``train.verl.tasks.<task>.methods``: the paper's non-verifiable tasks train only the -Sim pair)."""
    if task in verl_tasks(config):
        from pipeline_lib.engines.verl.translate import task_methods

        return task_methods(config, task)
    return list(config["train"]["methods"])


def rl_runs(config: Mapping[str, Any], methods: list[str] | None = None) -> list[str]:
    """DONE sentinels of the RL runs (of ``methods`` only, where given) that each task trains."""
    train = config["train"]
    return [f"results/train/{task}/{method}/seed{seed}/DONE.json" for task in train["tasks"]
            for method in trained_methods(config, task) if methods is None or method in methods
            for seed in train["seeds"]]


JUDGES = ("primary", "second")
JUDGE_TABLES = tuple(f"results/paper/tables/{name}.{ext}" for name in ("nonverifiable", "judge_validation")
                     for ext in ("tex", "md", "csv"))


def judge_seeds(config: Mapping[str, Any]) -> list[int]:
    return list(config["judge"]["seeds"] or config["train"]["seeds"])


def judge_summaries(config: Mapping[str, Any], judge: str, task: str) -> list[str]:
    """Every judged run's summary under one judge, in table order (method, then seed)."""
    return [f"results/judge/{judge}/{task}/{method}/seed{seed}/summary.json"
            for method in config["judge"]["methods"] for seed in judge_seeds(config)]


def judge_spec(config: Mapping[str, Any], judge: str) -> dict[str, Any]:
    """One judge's section with the schema defaults a ``$ref``'d section does not get filled."""
    if judge not in JUDGES:
        raise ValueError(f"unknown judge {judge!r}; judges: {JUDGES}")
    spec = {"kind": "programmatic", "label": "programmatic rubric judge", "basis": "facts", "weighting": "strict",
            "parse_retries": 2,
            "structured_output": False, "endpoint": {}, "serve": {}}
    return spec | dict(config["judge"].get(judge) or {})


def judge_rubric(config: Mapping[str, Any], task: str) -> str:
    return config["judge"]["rubrics"][task]


def validate_judges(config: Mapping[str, Any]) -> None:
    """Fail at parse time (``snakemake -n``) on a judge that could not score, naming the key."""
    problems = []
    missing = [task for task in config["judge"]["tasks"] if task not in config["judge"]["rubrics"]]
    if missing:
        raise ValueError(f"judge.rubrics has no rubric for judged task(s) {missing}")
    rubrics = {judge_rubric(config, task) for task in config["judge"]["tasks"]}
    for name in JUDGES:
        spec = judge_spec(config, name)
        where = f"judge.{name}"
        if spec["kind"] == "programmatic" and rubrics - {"meetingbank"}:
            problems.append(f"{where}: a programmatic judge scores only the MeetingBank rubric of synthetic tasks, "
                            f"not {sorted(rubrics - {'meetingbank'})}; use kind: llm")
        if spec["kind"] == "llm":
            if not spec["endpoint"].get("model"):
                problems.append(f"{where}.endpoint.model: an LLM judge needs the served model name")
            if not (spec["serve"].get("command") or spec["endpoint"].get("base_url")
                    or os.environ.get("OPENAI_BASE_URL")):
                problems.append(f"{where}: set serve.command (start a server for the job) or endpoint.base_url "
                                "(or OPENAI_BASE_URL)")
    if problems:
        raise ValueError("invalid judge config:\n  - " + "\n  - ".join(problems))


def judge_ours(config: Mapping[str, Any]) -> str:
    """The method the validation table reports judge scores for: the first SoftmaxGRPO method judged."""
    methods = config["judge"]["methods"]
    return next((m for m in methods if m.startswith("softmax")), methods[-1])


def judge_concurrency(config: Mapping[str, Any], judge: str) -> int:
    """Requests one scoring job keeps in flight: the Snakemake global resource ``judge_requests`` it holds."""
    spec = judge_spec(config, judge)
    return int(spec["endpoint"].get("concurrency", 8)) if spec["kind"] == "llm" else 0


def eval_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    """How a checkpoint is evaluated, without the transfer-benchmark keys (changing those reruns no evaluation)."""
    return {key: value for key, value in config["eval"].items() if key != "transfer"}


def transfer_targets(config: Mapping[str, Any]) -> list[str]:
    """lm-eval / AlpacaEval results of the transfer run's checkpoints (paper: the OpenThoughts run)."""
    transfer = config["eval"].get("transfer") or {}
    if not transfer.get("task"):
        return []
    benchmarks = [name for name, key in (("lm_eval", "lm_eval"), ("alpaca_eval", "alpaca_eval"))
                  if transfer.get(key, {}).get("enabled")]
    return [f"results/eval/transfer/{transfer['task']}/{method}/seed{seed}/{benchmark}.json"
            for benchmark in benchmarks for method in transfer["methods"] for seed in config["train"]["seeds"]]


def judge_score_files(config: Mapping[str, Any], task: str) -> list[str]:
    """The primary judge's per-item scores of every judged run (what calibration samples and correlates)."""
    return [path.replace("summary.json", "scores.jsonl") for path in judge_summaries(config, "primary", task)]


def calibration_ratings(config: Mapping[str, Any], task: str) -> list[str]:
    """The completed ratings CSV when it exists (so adding it later reruns the import), else nothing."""
    path = config["judge"]["calibration"]["ratings"].get(task)
    return [path] if path and os.path.exists(path) else []


def judge_targets(config: Mapping[str, Any]) -> list[str]:
    targets = []
    for task in config["judge"]["tasks"]:
        for judge in JUDGES:
            targets += judge_summaries(config, judge, task)
        targets += [f"results/judge/cross/{task}.json", f"results/judge/calibration/{task}/rate.html",
                    f"results/judge/calibration/{task}/agreement.json"]
    return targets


def judge_eval_targets(config: Mapping[str, Any]) -> list[str]:
    return [f"results/eval/{task}/{method}/seed{seed}/metrics.json" for task in config["judge"]["tasks"]
            for method in config["judge"]["methods"] for seed in judge_seeds(config)]


PAPER_RESULT_OUTPUTS = (
    *(f"results/paper/tables/{name}.{ext}" for name in ("table1", "gradient_allocation")
      for ext in ("tex", "md", "csv")),
    "results/paper/figures/training_curves.png",
    "results/paper/figures/training_curves.pdf",
    "results/paper/reproduction_report.md",
    "results/paper/audit_table1.txt",
)


def stage_targets(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """Final outputs per stage, plus ``all`` = every stage's targets in order."""
    targets: dict[str, list[str]] = {stage: [] for stage in STAGES}
    targets["data"] += data_targets(config)
    targets["paper"] += THEORY_OUTPUTS
    if config.get("train", {}).get("tasks"):
        targets["train"] += rl_runs(config) + baseline_runs(config)
        targets["eval"] += eval_targets(config)
        targets["paper"] += PAPER_RESULT_OUTPUTS
    if config.get("train", {}).get("ablation", {}).get("tasks"):
        targets["train"] += ablation_runs(config)
        targets["eval"] += ablation_eval_targets(config)
        targets["paper"] += ABLATION_OUTPUTS
    if config.get("train", {}).get("scale", {}).get("tasks") and config["train"]["scale"]["models"]:
        targets["train"] += scale_runs(config)
        targets["eval"] += scale_eval_targets(config)
        targets["paper"] += SCALE_OUTPUTS
    if config.get("judge", {}).get("tasks"):
        targets["eval"] += judge_eval_targets(config)
        targets["judge"] += judge_targets(config)
        targets["paper"] += JUDGE_TABLES
    targets["eval"] += transfer_targets(config)
    imagenet = config.get("imagenet", {})
    if imagenet.get("enabled"):
        targets["train"] += imagenet_runs(imagenet)
        targets["paper"] += IMAGENET_OUTPUTS
    targets["all"] = [path for stage in STAGES for path in targets[stage]]
    return targets


# --- baselines of Table 1 and the tau x M ablation (issue 8) ---------------------------------------------------------

#: Baselines in Table 1 order; each has a rule ``train_<name>`` and a spec in ``train.baselines.<name>``.
BASELINES = ("base", "rationalization", "iterative_dpo", "rl_logit", "raro", "opd")
ABLATION_OUTPUTS = tuple(f"results/paper/tables/ablation.{ext}" for ext in ("tex", "md", "csv"))


def baseline_tasks(config: Mapping[str, Any], method: str) -> list[str]:
    """Tasks one baseline runs on: its own ``train.baselines.<method>.tasks`` where set, else ``train.baselines.tasks``.

    The paper runs RARO on Countdown and DeepMath only (Table 1 shows -- for GSM8K) and Base and OPD also on the
    non-verifiable tasks (the non-verifiable table).
    """
    section = config["train"].get("baselines") or {}
    own = (section.get(method) or {}).get("tasks")
    return list(section.get("tasks", []) if own is None else own)


def baseline_runs(config: Mapping[str, Any], methods: list[str] | None = None) -> list[str]:
    section = config["train"].get("baselines") or {}
    return [f"results/train/{task}/{method}/seed{seed}/DONE.json" for method in (methods or section.get("methods", []))
            for task in baseline_tasks(config, method) for seed in section.get("seeds", [0])]


def baseline_eval_targets(config: Mapping[str, Any]) -> list[str]:
    return [path.replace("results/train/", "results/eval/").replace("DONE.json", "metrics.json")
            for path in baseline_runs(config)]


def _group_rl_spec(config: Mapping[str, Any], advantage: str) -> dict[str, Any]:
    """``train.rl`` with a method's advantage and the task's verifier reward, as ``rl_run_spec`` builds it."""
    return {**config["train"]["rl"], "advantage": advantage, "advantage_params": {}, "reward_weights": None}


def baseline_spec(config: Mapping[str, Any], method: str) -> dict[str, Any]:
    """The run spec of one baseline: its own section plus the shared SFT / RL settings it builds on."""
    section = config["train"]["baselines"]
    if method not in BASELINES:
        raise ValueError(f"unknown baseline {method!r}; baselines: {BASELINES}")
    own = {key: value for key, value in (section.get(method) or {}).items() if key != "tasks"}
    if method == "base":
        return {"model": config["train"]["model"]}
    if method == "rationalization":
        return {"annotate": {k: v for k, v in own.items() if k != "annotator"}, "sft": sft_run_spec(config)}
    if method == "iterative_dpo":
        return own
    if method == "rl_logit":
        return {**_group_rl_spec(config, own["advantage"]), "variant": own["variant"]}
    if method == "raro":
        return {**_group_rl_spec(config, own["advantage"]), "raro": {k: v for k, v in own.items() if k != "advantage"}}
    return _group_rl_spec(config, "grpo")  # opd: the advantage is only logged, the loss is the reverse KL


def opd_teacher_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    """SFT settings with the teacher's steps and lr; a ``scratch`` teacher may also be larger (``model``)."""
    teacher = config["train"]["baselines"]["opd"]["teacher"]
    if teacher["init"] == "sft" and teacher.get("model"):
        raise ValueError("train.baselines.opd.teacher.model overrides need init: scratch (an SFT-initialised teacher "
                         "has the SFT model's shape)")
    spec = sft_run_spec(config)
    return {**spec, "steps": teacher["steps"], "lr": teacher["lr"],
            "warmup_steps": min(spec["warmup_steps"], teacher["steps"] - 1),
            "model": {**spec["model"], **teacher.get("model", {})}}


def base_init(config: Mapping[str, Any], task: str) -> str | None:
    """The pretrained model a task's Base row evaluates: the verl model on verl tasks; None = the tiny seeded init."""
    return config["train"]["verl"]["model"] if task in verl_tasks(config) else None


def opd_teacher(config: Mapping[str, Any], task: str, seed: int | str) -> str:
    """The OPD teacher's run sentinel (trained by ``train_opd_teacher``), or the ready model named in ``hub``."""
    hub = config["train"]["baselines"]["opd"]["teacher"].get("hub")
    return hub or f"results/train/{task}/opd_teacher/seed{seed}/DONE.json"


def ablation_method(tau: float, group_size: int) -> str:
    """Run name of one ablation cell, e.g. ``softmax_tau0p1_m4`` (tau 0.1, M 4)."""
    return f"softmax_tau{tau:g}_m{group_size}".replace(".", "p")


def ablation_tau(text: str) -> float:
    return float(text.replace("p", "."))


def ablation_runs(config: Mapping[str, Any]) -> list[str]:
    section = config["train"]["ablation"]
    return [f"results/train/{task}/{ablation_method(tau, m)}/seed{seed}/DONE.json" for task in section["tasks"]
            for tau in section["taus"] for m in section["group_sizes"] for seed in section["seeds"]]


def ablation_eval_targets(config: Mapping[str, Any]) -> list[str]:
    return [path.replace("results/train/", "results/eval/").replace("DONE.json", "metrics.json")
            for path in ablation_runs(config)]


def ablation_run_spec(config: Mapping[str, Any], tau: float, group_size: int) -> dict[str, Any]:
    """SoftmaxGRPO-Exact's spec with one (tau, M): every other setting is the main runs'."""
    steps = config["train"]["ablation"]["steps"] or config["train"]["rl"]["steps"]
    return {**_group_rl_spec(config, "softmax"), "advantage_params": {"tau": tau}, "group_size": group_size,
            "steps": steps}


def softmax_exact_method(config: Mapping[str, Any]) -> str:
    """The configured SoftmaxGRPO-Exact method (softmax advantage, verifier reward) the ablation varies."""
    for name, entry in config["train"]["methods"].items():
        if entry["advantage"] in ("softmax", "sage") and entry["reward"] == "verifier":
            return name
    raise ValueError("the tau x M ablation needs a train.methods entry with advantage softmax and reward verifier")


def verl_ablation_spec(config: Mapping[str, Any], task: str, tau: float, group_size: int) -> dict[str, Any]:
    """The verl run of one ablation cell: the task's SoftmaxGRPO-Exact run with its row's tau / M (/ steps) replaced."""
    from pipeline_lib.engines.verl.translate import rl_spec

    changed = copy.deepcopy(dict(config))
    row = changed["train"]["verl"]["tasks"][task]
    row |= {"tau": tau, "group_size": group_size}
    if config["train"]["ablation"]["steps"]:
        row["steps"] = config["train"]["ablation"]["steps"]
    return rl_spec(changed, task, softmax_exact_method(config))


SCALE_OUTPUTS = tuple(f"results/paper/tables/scale.{ext}" for ext in ("tex", "md", "csv"))


def scale_runs(config: Mapping[str, Any], methods: list[str] | None = None) -> list[str]:
    """RL sentinels of the scale study: ``<method>_at_<model>`` per task, model and seed (``sft`` for the SFT start)."""
    section = config["train"]["scale"]
    return [f"results/train/{task}/{method}_at_{name}/seed{seed}/DONE.json" for task in section["tasks"]
            for name in section["models"] for method in (methods or section["methods"]) for seed in section["seeds"]]


def scale_eval_targets(config: Mapping[str, Any]) -> list[str]:
    """Evaluations the scale table reads: the main-scale runs of the methods, and every scale run."""
    section = config["train"]["scale"]
    main = [f"results/eval/{task}/{method}/seed{seed}/metrics.json" for task in section["tasks"]
            for method in section["methods"] for seed in section["seeds"]]
    return main + [p.replace("results/train/", "results/eval/").replace("DONE.json", "metrics.json")
                   for p in scale_runs(config)]


def scale_config(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The config with one scale's base model: ``train.model`` overridden (local), ``train.verl.model`` (verl)."""
    models = config["train"]["scale"]["models"]
    if name not in models:
        raise ValueError(f"unknown scale {name!r}; train.scale.models: {sorted(models)}")
    changed = copy.deepcopy(dict(config))
    changed["train"]["model"] = {**changed["train"]["model"], **models[name].get("model", {})}
    if "verl" in changed["train"] and models[name].get("hub"):
        changed["train"]["verl"]["model"] = models[name]["hub"]
    return changed
