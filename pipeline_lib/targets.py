"""Target lists for the Snakefile's named targets (``all``, ``data``, ``train``...).

Built here, not in ``common.smk``, so they are plain tested Python. Each stage's
issue extends :func:`stage_targets` with the outputs its rules make.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "IMAGENET_OUTPUTS",
    "STAGES",
    "THEORY_OUTPUTS",
    "data_targets",
    "eval_targets",
    "imagenet_run_spec",
    "imagenet_runs",
    "rl_run_spec",
    "rl_runs",
    "rl_train_data",
    "sft_run_spec",
    "stage_targets",
    "table1_methods",
    "tiny_task_spec",
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


def rl_train_data(config: Mapping[str, Any], task: str, method: str) -> str:
    """Countdown's similarity runs train on the GOLD prompts, which carry reference answers."""
    if task == "countdown" and config["train"]["methods"][method]["reward"] == "similarity":
        return f"results/data/{task}/rl_sim_train.parquet"
    return f"results/data/{task}/rl_train.parquet"


def table1_methods(config: Mapping[str, Any]) -> list[str]:
    return ["sft", *config["train"]["methods"]]


def eval_targets(config: Mapping[str, Any]) -> list[str]:
    train = config["train"]
    return [f"results/eval/{task}/{method}/seed{seed}/metrics.json"
            for task in train["tasks"] for method in table1_methods(config) for seed in train["seeds"]]


def rl_runs(config: Mapping[str, Any], methods: list[str] | None = None) -> list[str]:
    train = config["train"]
    return [f"results/train/{task}/{method}/seed{seed}/DONE.json"
            for task in train["tasks"] for method in (methods or list(train["methods"])) for seed in train["seeds"]]


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
        targets["train"] += rl_runs(config)
        targets["eval"] += eval_targets(config)
        targets["paper"] += PAPER_RESULT_OUTPUTS
    imagenet = config.get("imagenet", {})
    if imagenet.get("enabled"):
        targets["train"] += imagenet_runs(imagenet)
        targets["paper"] += IMAGENET_OUTPUTS
    targets["all"] = [path for stage in STAGES for path in targets[stage]]
    return targets
