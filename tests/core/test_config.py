"""The schema's defaults are the paper's settings; config/config.yaml is the miniature's overlay on them.

The snapshots under tests/fixtures/config are the resolved configs (file + schema defaults) of the tiny default, the
paper config and the preflight, written by ``python -m pipeline_lib settings`` (:mod:`pipeline_lib.core.schema_docs`;
``tests/workflow/test_generated.py`` fails when one is stale). They were main's before the defaults moved (commit
3e8a4d2) and are regenerated only on purpose: a changed default shows in review as a changed snapshot, and each loader
(the pipeline's, Snakemake's, the plan CLI's) must resolve a config to exactly its snapshot.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from snakemake.common.configfile import load_configfile as snakemake_load_configfile

from pipeline_lib.core.config import ConfigError, load_config_file, validate_config
from pipeline_lib.plan.settings import engine_settings
from pipeline_lib.plan.table import load_config as plan_load_config

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
SNAPSHOTS = REPO / "tests" / "fixtures" / "config"
#: Keys of the overlay that list runs (what the miniature trains, judges, builds): stated even where equal to the
#: default, so the overlay reads as the miniature's whole study.
RUN_LISTS = {"tasks", "seeds", "methods"}


def _json(config: Any) -> Any:
    """The config as the snapshot stores it (JSON types)."""
    return json.loads(json.dumps(config))


def _snapshot(name: str) -> dict[str, Any]:
    return json.loads((SNAPSHOTS / f"resolved_{name}.json").read_text())


def _resolve(path: Path) -> dict[str, Any]:
    return _json(validate_config(load_config_file(path), SCHEMA, base_dir=REPO))


def _defaults() -> dict[str, Any]:
    return _json(validate_config({}, SCHEMA, base_dir=REPO))


@pytest.mark.parametrize(("name", "path"), [("tiny", "config/config.yaml"), ("paper", "config/paper.yaml")])
def test_config_resolves_as_on_main(name, path):
    """(a), (b): the tiny default and the paper config resolve to main's snapshot, through the pipeline's loader,
    Snakemake's own config loader (what `snakemake --configfile` reads) and the plan CLI's loader."""
    snapshot = _snapshot(name)
    assert _resolve(REPO / path) == snapshot
    by_snakemake = validate_config(dict(snakemake_load_configfile(REPO / path)), SCHEMA, base_dir=REPO)
    assert _json(by_snakemake) == snapshot
    assert _json(plan_load_config([REPO / path], SCHEMA)) == snapshot


def test_preflight_resolves_as_on_main():
    """The preflight's config as workflow/rules/preflight.smk builds it: config/preflight.yaml with the tiny default's
    sections over it (the data rules read them), then the schema's defaults."""
    config = validate_config(load_config_file(REPO / "config/preflight.yaml"), SCHEMA, base_dir=REPO)
    config |= {key: value for key, value in load_config_file(REPO / "config/config.yaml").items() if key != "preflight"}
    assert _json(validate_config(config, SCHEMA, base_dir=REPO)) == _snapshot("preflight")


#: App. B of the paper (tables hyperparams_verifiable / hyperparams_nonverifiable; "LLM-Judge Validation"; the
#: model-scale and ablation tables), as the schema names each setting. Written out from the paper, not from a config.
APP_B_SHARED = {("label",): "paper", ("train", "engine"): "verl",
                ("train", "tasks"): ["gsm8k", "countdown", "deepmath", "poetry", "meetingbank", "openthoughts"],
                ("train", "verl", "model"): "Qwen/Qwen2.5-1.5B", ("train", "rl_start"): "base",
                ("train", "rl", "lr"): 1e-6,
                ("train", "rl", "clip_low"): 0.2, ("train", "rl", "clip_high"): 0.28,
                ("train", "rl", "beta"): 1e-3,
                ("judge", "primary", "endpoint", "model"): "Qwen/Qwen3-30B-A3B-Thinking-2507",
                ("judge", "second", "endpoint", "model"): "google/gemma-4-31B-it",
                ("train", "baselines", "opd", "teacher", "hub"): "Qwen/Qwen3-8B",
                ("train", "ablation", "taus"): [0.1, 0.3, 0.5, 1.0, 1.3, 1.5, 10.0],
                ("train", "ablation", "group_sizes"): [4, 8],
                ("train", "scale", "models", "qwen25_3b", "hub"): "Qwen/Qwen2.5-3B",
                ("eval", "transfer", "task"): "openthoughts",
                ("eval", "transfer", "lm_eval", "tasks"): ["mmlu", "gpqa_main_zeroshot"]}
#: task -> (tau, M, rollout batch, mini-batch per device, iterations, max response tokens, nodes x GPUs per node)
APP_B_TASKS = {"gsm8k": (0.1, 8, 64, 4, 1000, 256, 1, 8), "countdown": (0.1, 8, 64, 4, 2000, 256, 1, 8),
               "deepmath": (0.3, 16, 512, 8, 3220, 1024, 2, 8), "poetry": (0.3, 8, 64, 4, 1350, 1024, 1, 8),
               "meetingbank": (0.3, 8, 512, 4, 3220, 4096, 2, 8), "openthoughts": (0.3, 8, 512, 4, 3220, 6144, 2, 8)}
APP_B_ROW = ("tau", "group_size", "prompts_per_step", "mini_batch_per_device", "steps", "max_response_tokens", "nodes",
             "gpus_per_node")


def _at(config: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        config = config[key]
    return config


def test_schema_defaults_are_the_papers_settings():
    """(c): an empty config is the paper run: App. B's shared and per-task settings, judges, teacher, ablation, scale,
    and the tiny default's settings nowhere."""
    defaults = _defaults()
    for path, value in APP_B_SHARED.items():
        assert _at(defaults, path) == value, ".".join(path)
    for task, row in APP_B_TASKS.items():
        task_row = {**engine_settings(defaults, task, "rl", "verl"), **defaults["train"]["task_settings"][task]}
        assert tuple(task_row[key] for key in APP_B_ROW) == row, task
    assert all(defaults["data"]["datasets"][name]["enabled"] for name in APP_B_TASKS)
    imagenet = defaults["imagenet"]
    assert (imagenet["dataset"]["kind"], imagenet["model"]["kind"]) == ("imagefolder", "resnet50")
    # with the two site paths config/paper.yaml adds, the defaults are main's resolved paper config, key for key
    paper = _snapshot("paper")
    defaults["imagenet"]["dataset"]["root"] = paper["imagenet"]["dataset"]["root"]
    alpaca_eval = paper["eval"]["transfer"]["alpaca_eval"]
    defaults["eval"]["transfer"]["alpaca_eval"]["instructions"] = alpaca_eval["instructions"]
    assert defaults == paper


def _leaves(node: Any, path: tuple[str, ...] = ()) -> Any:
    """Every key path an overlay sets: a value that is not a mapping, or an empty mapping."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    else:
        yield path


def test_tiny_overlay_states_only_changes():
    """(d): every key of config/config.yaml changes the resolved config (taking it out gives another one or an invalid
    one), or lists the miniature's runs."""
    overlay = load_config_file(REPO / "config/config.yaml")
    resolved = _json(validate_config(copy.deepcopy(overlay), SCHEMA, base_dir=REPO))
    redundant = []
    for path in _leaves(overlay):
        if RUN_LISTS & set(path):
            continue
        without = copy.deepcopy(overlay)
        del _at(without, path[:-1])[path[-1]]
        try:
            if _json(validate_config(without, SCHEMA, base_dir=REPO)) == resolved:
                redundant.append(".".join(path))
        except ConfigError:  # without it the config is invalid (a dataset without sources is built): it is needed
            continue
    assert not redundant, f"config/config.yaml sets keys to their schema default: {redundant}"


def test_an_old_imagenet_rollouts_key_names_group_sizes():
    """M is ``group_size`` in every study: a config still listing the ImageNet study's M values as
    ``imagenet.rollouts`` is refused, told the key's new name (:data:`pipeline_lib.core.config.RENAMED_KEYS`)."""
    overlay = load_config_file(REPO / "config/config.yaml")
    overlay["imagenet"]["rollouts"] = overlay["imagenet"].pop("group_sizes")
    with pytest.raises(ConfigError, match=r"unknown key 'imagenet\.rollouts' \(renamed: use 'group_sizes'"):
        validate_config(overlay, SCHEMA, base_dir=REPO)
