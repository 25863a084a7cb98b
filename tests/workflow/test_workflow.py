"""The Snakemake workflow: config validation, dry-runs, lint, targets and a real theory run."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pipeline_lib.core.config import ConfigError, load_schema, validate_config
from pipeline_lib.core.io import sha256_file
from pipeline_lib.plan.targets import THEORY_OUTPUTS, stage_targets
from tests.conftest import REPO, SMALL_THEORY, _planned, repo_env, snakemake

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def schema_keys(schema: dict, prefix: str = "") -> list[str]:
    keys = []
    for name, sub in schema.get("properties", {}).items():
        keys.append(prefix + name)
        keys += schema_keys(sub, prefix + name + ".")
    return keys


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/paper.yaml"])
def test_configs_validate(configfile):
    config = yaml.safe_load((REPO / configfile).read_text())
    validated = validate_config(config, SCHEMA)
    assert validated["label"] in ("tiny", "paper") and validated["theory"]["group_size"] >= 2


def test_every_schema_key_has_description_default_and_readme_entry():
    schema = load_schema(SCHEMA)
    readme = (REPO / "config" / "README.md").read_text()

    def walk(node, path):
        for name, sub in node.get("properties", {}).items():
            assert "description" in sub and "default" in sub, f"{path}{name} lacks description/default"
            walk(sub, f"{path}{name}.")

    walk(schema, "")
    missing = [key for key in schema_keys(schema) if f"`{key}`" not in readme]
    assert not missing, f"config/README.md does not document {missing}"


def test_validation_names_unknown_and_mistyped_keys():
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["theory"]["mc_groupz"] = 3
    config["theory"]["group_size"] = "eight"
    with pytest.raises(ConfigError) as excinfo:
        validate_config(config, SCHEMA)
    message = str(excinfo.value)
    assert "unknown key 'theory.mc_groupz'" in message
    assert "key 'theory.group_size': 'eight' is not of type 'integer'" in message


def test_validation_fills_defaults():
    config = {"label": "test", "seed": 1, "theory": {"group_size": 4, "taus": [1.0], "p_grid_points": 3,
                                                       "mc_groups": 100}}
    validate_config(config, SCHEMA)
    assert config["theory"]["verification_mc_groups"] == 1_000_000


def test_targets_cover_the_theory_outputs():
    config: dict = {}
    validate_config(config, SCHEMA)
    targets = stage_targets(config)
    assert set(THEORY_OUTPUTS) <= set(targets["paper"])
    assert targets["all"] == [p for stage in ("data", "train", "eval", "judge", "paper") for p in targets[stage]]


def job_counts(stdout: str) -> dict[str, int]:
    """Rule -> planned jobs, from the "Job stats" table of ``snakemake -n`` (the first one printed)."""
    lines = stdout.splitlines()
    start = lines.index("Job stats:") + 3  # skip the "job count" header and its rule
    counts = {}
    for line in lines[start:]:
        name, count = line.split()
        if name == "total":
            return counts
        counts[name] = int(count)
    raise AssertionError("no total row in the Job stats table")


#: Jobs of the tiny data (the synthetic tasks and the tokenizer trained on them) per config: the tiny default builds
#: its three tasks and tokenizer; the paper plan (pretrained hub models with their own tokenizers) builds none.
TINY_DATA_JOBS = {"config/config.yaml": {"data_tiny": 3, "data_tokenizer": 1}, "config/paper.yaml": {}}


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/paper.yaml"])
def test_dry_run_plans_the_dag(workflow_copy, configfile):
    """The plan of both configs, and no JSON on any shell command it shows (specs travel in files:
    pipeline_lib.core.cli);
    Snakemake's own job blocks (``PIPELINE_CONSOLE=full``) and ``-p``, so every command is printed."""
    result = snakemake(workflow_copy, "-n", "-p", "--configfile", configfile, full_console=True)
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if line.startswith("Shell command: ")]
    assert commands, result.stdout[-3000:]
    assert not [command for command in commands if '{"' in command], [c for c in commands if '{"' in c][:2]
    assert "paper_theory_data" in result.stdout and "paper_theory" in result.stdout
    counts = job_counts(result.stdout)
    tiny = {rule: counts[rule] for rule in ("data_tiny", "data_tokenizer") if rule in counts}
    assert tiny == TINY_DATA_JOBS[configfile], tiny


def test_the_paper_plan_reads_nothing_tiny():
    """No run of the paper plan reads the pipeline's tokenizer or a tiny task (a verl task's Base is the hub model,
    with its own tokenizer), so its data targets are the paper's datasets only; the tiny default's Base reads it."""
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.runs import TOKENIZER
    from pipeline_lib.plan.table import load_config

    paper = load_config([REPO / "config/paper.yaml"])
    plan = plan_runs(paper, check_estimators=False)
    tiny = set(paper["data"]["tiny"]["tasks"]) | {"tokenizer"}
    read = {path for run in plan.runs for path in run.inputs.values()}
    assert TOKENIZER not in read
    assert not {path.split("/")[2] for path in read if path.startswith("results/data/")} & tiny
    assert not {path.split("/")[2] for path in stage_targets(paper, plan)["data"]} & tiny
    base = next(run for run in plan.runs if run.method == "base")
    assert "--tokenizer" not in base.args
    assert base.args[base.args.index("--init") + 1] == paper["train"]["verl"]["model"]
    default = plan_runs(load_config([REPO / "config/config.yaml"]), check_estimators=False)
    assert TOKENIZER in next(run for run in default.runs if run.method == "base").inputs.values()


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/paper.yaml"])
def test_every_paper_output_is_made_by_exactly_one_step_of_one_command(configfile):
    """paper.smk is one rule per step of pipeline_lib.paper.steps.paper_steps: each paper target is one step's output,
    no
    output is two steps', and each step runs one ``python -m pipeline_lib...`` command that writes its log."""
    from pipeline_lib.paper.steps import paper_steps
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.table import load_config

    config = load_config([REPO / configfile])
    plan = plan_runs(config, check_estimators=False)
    paper = stage_targets(config, plan)["paper"]
    steps = paper_steps(config, plan, paper)
    outputs = [path for step in steps for path in step.outputs.values()]
    assert len(outputs) == len(set(outputs)) and set(paper) <= set(outputs), sorted(set(paper) - set(outputs))
    assert len({step.name for step in steps}) == len(steps)
    for step in steps:
        assert step.module.startswith("pipeline_lib") and "python -m" not in step.args, step.name
        assert all(key in step.outputs for key in step.reports), step.name


#: The rules' size budget (issue 30): the rules are wiring; what they read comes from the plan and the library.
#: 750 until 2026-12-02, when Poetry's pairwise judge, the online/offline split of AlpacaEval and the data build,
#: the attempt record and RL-Logit's held-out validation added rules (892 lines); raised, to be brought back down
#: by moving rule wiring into the library (noted in the issue 56/57 closing note). 935 since Table 3's pass-rate
#: probe (rule probe_pass_rate, 2026-12-02, second stop of the day): the same debt, noted again.
RULE_LINES = 935


def test_rules_are_short_and_name_no_method_or_task():
    """Which methods and tasks exist is the registry's and the config's business: a rule file that names one (a
    wildcard constraint listing tasks, an input listing methods) goes stale when either changes."""
    from pipeline_lib.plan import METHODS
    from pipeline_lib.plan.table import load_config

    rules = {path.name: path.read_text() for path in sorted((REPO / "workflow" / "rules").glob("*.smk"))}
    lines = sum(text.count("\n") for text in rules.values())
    assert lines <= RULE_LINES, f"workflow/rules/*.smk: {lines} lines, over the budget of {RULE_LINES}"
    tasks = set()
    for configfile in ("config/config.yaml", "config/paper.yaml"):
        config = load_config([REPO / configfile])
        train, data = config["train"], config["data"]
        tasks |= {*train["tasks"], *config["judge"]["tasks"], *data["tiny"]["tasks"], *data["datasets"],
                  *train["task_settings"], *train["ablation"]["tasks"], *train["scale"]["tasks"],
                  *train["baselines"]["tasks"], *filter(None, [config["eval"]["transfer"]["task"]])}
    assert {"countdown_tiny", "gsm8k", "poetry"} <= tasks and {"grpo_exact", "softmax_exact"} <= set(METHODS)
    named = sorted({(name, word) for name, text in rules.items() for word in {*METHODS, *tasks}
                    if re.search(rf"(?<![\w.]){re.escape(word)}(?!\w)", text)})
    assert not named, f"rule files name methods or tasks (ask the plan through common.smk instead): {named}"


def test_unknown_config_key_fails_at_parse_time(workflow_copy):
    (workflow_copy / "bad.yaml").write_text("label: tiny\nseed: 0\nthoery: {}\n")
    result = snakemake(workflow_copy, "-n", "--configfile", "bad.yaml")
    assert result.returncode != 0
    assert "unknown key 'thoery'" in result.stdout + result.stderr


def test_lint_is_clean(workflow_copy):
    result = snakemake(workflow_copy, "--lint")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_that_runs_a_command_has_a_benchmark():
    """Where the default run's time goes is read from Snakemake's per-job benchmark files
    (benchmarks/default_run.py), so a rule without one would be time nobody sees."""
    missing = []
    for smk in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        for rule, body in re.findall(r"^ *rule(?: (\w+))?:\n(.*?)(?=^ *rule\b|\Z)", smk.read_text(), re.S | re.M):
            if re.search(r"^ +(shell|run|script):", body, re.M) and not re.search(r"^ +benchmark:", body, re.M):
                missing.append(f"{smk.name}: {rule or 'the rule in the loop'}")
    assert not missing, f"rules without a benchmark: directive: {missing}"


def test_paper_theory_ran_end_to_end_in_the_main_job(main_tree):
    """The theory stage of the README's main job (conftest.main_tree; the fixture's dry run there plans nothing)."""
    for relative in THEORY_OUTPUTS:
        path = main_tree / relative
        assert path.is_file() and path.stat().st_size > 0, relative
        sidecar = json.loads(Path(str(path) + ".prov.json").read_text())
        record = next(o for o in sidecar["outputs"] if o["path"] == relative)
        assert record["sha256"] == sha256_file(path)
    verification = json.loads((main_tree / "results/paper/theory_verification.json").read_text())
    assert verification["passed"] == verification["total"] > 10
    table = (main_tree / "results/paper/tables/weight_view.md").read_text()
    assert "SoftmaxGRPO (tau=0.1)" in table and "GRPO" in table
    assert (main_tree / "logs/paper_theory_data.log").is_file()


def test_empty_config_gets_every_default():
    config: dict = {}
    validate_config(config, SCHEMA)
    assert config["theory"]["group_size"] == 8 and config["label"] == "paper"
    assert load_schema(SCHEMA)["properties"]["theory"]["default"] == {}  # the schema itself is not mutated


def test_imagenet_study_ran_end_to_end_in_the_main_job_and_a_new_seed_plans_only_its_runs(main_tree, main_tree_copy):
    """The ImageNet objective study of the README's main job; then, on a copy, a seed added to the config plans only
    the new seed's runs (and the paper rules), never the existing ones."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    table = (main_tree / "results/paper/tables/imagenet_objectives.md").read_text()
    for name in ("ML (cross-entropy)", "REINFORCE", "GRPO", "SoftmaxGRPO"):
        assert name in table
    assert (main_tree / "results/paper/figures/imagenet_objectives.png").stat().st_size > 10_000
    largest = max(config["imagenet"]["group_sizes"])
    for seed in config["imagenet"]["seeds"]:
        done = json.loads((main_tree / f"results/train/imagenet/softmax/m{largest}/seed{seed}/DONE.json").read_text())
        assert done["final_step"] == done["total_steps"] > 0
    new_seed = max(config["imagenet"]["seeds"]) + 1
    config["imagenet"]["seeds"] = [*config["imagenet"]["seeds"], new_seed]
    (main_tree_copy / "more_seeds.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    plan = snakemake(main_tree_copy, "paper_imagenet", "-n", "--configfile", "more_seeds.yaml")
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert _planned_rules(plan) == {"train_imagenet_group", "paper_imagenet_data", "paper_imagenet"}
    trained = re.findall(r"Job \d+: train_imagenet_group imagenet seed (\d+) ", plan.stdout)
    assert trained == [str(new_seed)], plan.stdout[-3000:]


def test_data_stage_builds_tiny_and_every_real_dataset_from_fixtures(workflow_copy):
    from tests.chat_server import ChatServer
    from tests.conftest import real_spec

    config = validate_config(yaml.safe_load((REPO / "config/config.yaml").read_text()), SCHEMA)  # every key
    config["data"]["tiny"] |= {"n_train": 80, "n_test": 20}
    config["data"]["tokenizer"]["vocab_size"] = 400
    config["theory"] = SMALL_THEORY
    with ChatServer() as server:
        config["data"]["datasets"] = {
            name: real_spec(name) for name in ("gsm8k", "countdown", "deepmath", "meetingbank", "openthoughts")}
        config["data"]["datasets"]["poetry"] = real_spec("poetry", synthesis={"base_url": server.base_url,
                                                                              "model": "test"})
        (workflow_copy / "fixtures.yaml").write_text(yaml.safe_dump(config))
        result = snakemake(workflow_copy, "data", "--cores", "2", "--configfile", "fixtures.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("countdown_tiny", "arith_tiny", "meeting_tiny", "tokenizer", "gsm8k", "countdown", "deepmath",
                 "poetry", "meetingbank", "openthoughts"):
        manifest = workflow_copy / "results/data" / name / "manifest.json"
        assert manifest.is_file(), name
        assert Path(str(manifest) + ".prov.json").is_file(), name
    assert (workflow_copy / "results/data/countdown/rl_sim_train.parquet").is_file()


def _planned_rules(result: subprocess.CompletedProcess) -> set[str]:
    """The rules of a dry run that must have succeeded (conftest's job-table reader)."""
    assert result.returncode == 0, result.stderr[-3000:]
    return _planned(result)


def test_the_main_job_ran_the_language_model_chain_end_to_end(main_tree):
    """data -> tokenizer -> SFT -> RL (five methods) -> eval -> Table 1, allocation and adaptive-tau tables, curves: the
    README's main job's tree (conftest.main_tree; its dry run there plans nothing), not a second run of the DAG."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    table = pd.read_csv(main_tree / "results/paper/tables/table1.csv")
    rl_rows = ["GRPO-Sim", "GRPO-Exact", "SoftmaxGRPO-Sim", "SoftmaxGRPO-Exact", "SoftmaxGRPO-ESS"]
    assert list(table["Method"])[1] == "SFT" and list(table["Method"])[-5:] == rl_rows
    for task in config["train"]["tasks"]:  # SFT and every RL method on every task, over every seed
        for row in table[table["Method"].isin(["SFT", *rl_rows])][task]:
            assert row.endswith(f"(n={len(config['train']['seeds'])})"), (task, row)
    assert (main_tree / "results/paper/figures/adaptive_tau.png").stat().st_size > 10_000
    allocation = pd.read_csv(main_tree / "results/paper/tables/gradient_allocation.csv")
    assert set(allocation["Method"]) == {"GRPO-Exact", "SoftmaxGRPO-Exact"}
    # train.rl.prompt_pool: 20 steps x 16 prompts over 80 visit every prompt 4 times, so every group is binned by its
    # prompt's other visits (none left in the Unbinned column)
    rl = config["train"]["rl"]
    visits = len(config["train"]["seeds"]) * rl["steps"] * rl["prompts_per_step"]
    assert set(allocation["Unbinned"]) == {f"0.0% (0/{visits} groups)"}
    assert (main_tree / "results/paper/figures/training_curves.png").stat().st_size > 10_000
    for task in config["train"]["tasks"]:
        for seed in config["train"]["seeds"]:
            for method in ("sft", "grpo_exact", "softmax_sim"):
                metrics = json.loads((main_tree / f"results/eval/{task}/{method}/seed{seed}/metrics.json").read_text())
                assert 0.0 <= metrics["pass@1_greedy"] <= 1.0, (task, method, seed)
    assert json.loads((main_tree / "results/paper/tables/table1.tex.prov.json").read_text())["config_sha256"]
    audit = subprocess.run([sys.executable, "-m", "pipeline_lib", "audit", "results/paper/tables/table1.tex",
                            "--no-fail"], cwd=main_tree, capture_output=True, text=True, env=repo_env())
    assert "train_rl" in audit.stdout and "train_sft" in audit.stdout and "data_tiny" in audit.stdout
    # every training run wrote its curve to the local tracking store (TensorBoard event files) as it went
    for method in ("sft", "grpo_exact", "softmax_ess"):
        assert list((main_tree / f"results/tracking/countdown_tiny/{method}/seed0").glob("events.out.tfevents.*"))


def test_a_changed_setting_reruns_only_what_it_changes_on_the_main_jobs_tree(main_tree_copy):
    """On a copy of the main job's tree: evaluation settings (or the dashboard) rerun evaluation and the paper rules,
    never training; the RL settings rerun the RL runs (not SFT), their evaluations and the tables; --forcerun of one
    rule plans it and what depends on it only."""
    tree = main_tree_copy
    # the config's keys in the file's order: the params Snakemake compares are JSON in the config's key order, so a
    # reordered file would rerun every job (noted in issue 58's terms: a change reruns what it changes)
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["eval"]["samples"] = config["eval"]["samples"] + 1
    config["tracking"] = {"backends": ["console", "tensorboard"]}
    (tree / "e2e.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    jobs = _planned_rules(snakemake(tree, "-n", "--configfile", "e2e.yaml"))
    assert "eval_checkpoints_countdown_tiny_seed0" in jobs and "paper_table1" in jobs  # a (task, seed): one job
    assert not jobs & {"train_local", "train_local_group", "train_ablation_group", "data_tiny", "data_tokenizer"}, jobs
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["train"]["rl"]["lr"] = config["train"]["rl"]["lr"] / 2
    (tree / "e2e.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = snakemake(tree, "-n", "--configfile", "e2e.yaml")
    assert {"train_local_group", "eval_checkpoints_countdown_tiny_seed0", "paper_table1"} <= _planned_rules(result)
    # the RL runs train in their task's group job (grpo_exact, softmax_exact, softmax_ess...); SFT, a train_local job
    # of its own, is not planned (the console prints one line per job, naming the group's task and seed)
    assert "data_tiny" not in _planned_rules(result)
    assert re.search(r"Job \d+: train_local_group countdown_tiny seed 0\b", result.stdout), result.stdout[-3000:]
    assert not re.search(r"Job \d+: train_local \w+/sft seed", result.stdout), result.stdout[-3000:]
    jobs = _planned_rules(snakemake(tree, "paper_gradient_allocation", "-n", "--forcerun",
                                    "paper_gradient_allocation"))
    assert jobs == {"paper_gradient_allocation"}
