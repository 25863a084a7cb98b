"""One process running several entry points gives the same outputs as separate commands."""

import hashlib
import json
import shlex

import pytest

from pipeline_lib.core.cli import json_text
from pipeline_lib.core.run_spec import SFTSettings
from pipeline_lib.jobs.engines.local.batch import argv, main, run_steps
from pipeline_lib.plan import RunSpec

SPEC = {"n_train": 20, "n_val": 5, "n_test": 5, "imperfect_fraction": 0.3, "numbers_per_task": [3], "max_number": 9,
        "max_target": 100}


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.parquet"))}


def _build(task, out):
    return {"module": "pipeline_lib.core.data.build",
            "args": ["tiny", "--task", task, "--spec", json.dumps(SPEC), "--seed", "0", "--out-dir", str(out)]}


def test_batched_steps_match_separate_runs(tmp_path):
    from pipeline_lib.core.data.build import main as build_main

    for task in ("countdown_tiny", "arith_tiny"):
        step = _build(task, tmp_path / "alone" / task)
        assert build_main(step["args"]) == 0
    seconds = run_steps([_build(t, tmp_path / "batch" / t) for t in ("countdown_tiny", "arith_tiny")])
    assert len(seconds) == 2
    for task in ("countdown_tiny", "arith_tiny"):
        alone, batched = _digest(tmp_path / "alone" / task), _digest(tmp_path / "batch" / task)
        assert set(alone) == {"rl_train.parquet", "rl_val.parquet", "rl_test.parquet", "sft_train.parquet"}
        assert alone == batched


def test_batch_rejects_other_modules_and_bad_steps():
    with pytest.raises(ValueError, match="not a batchable entry point"):
        run_steps([{"module": "os", "args": []}])
    with pytest.raises(ValueError, match="args must be a list of strings"):
        run_steps([{"module": "pipeline_lib.core.data.build", "args": [1]}])
    with pytest.raises(ValueError, match="non-empty"):
        main(["--steps", "[]"])


def test_sft_with_in_process_eval_in_a_batch_matches_a_separate_evaluation(tmp_path):
    """``--eval-*`` on a training entry point writes what ``pipeline_lib.jobs.eval.evaluate`` writes for that model."""
    from pipeline_lib.core.data.build import build_tokenizer
    from pipeline_lib.jobs.eval.evaluate import main as eval_main

    run_steps([_build("arith_tiny", tmp_path / "data")])
    build_tokenizer([tmp_path / "data" / "sft_train.parquet"], 300, tmp_path / "tok")
    spec = {"lr": 0.003, "weight_decay": 0.0, "warmup_steps": 1, "steps": 3, "batch_size": 4, "max_response_tokens": 16,
            "grad_clip": 1.0, "checkpoint_every": 10,
            "model": {"hidden_size": 16, "intermediate_size": 32, "layers": 1, "heads": 2, "kv_heads": 1,
                      "max_positions": 256}}
    eval_spec = json.dumps({"batch_size": 8, "samples": 2, "max_new_tokens": 8, "temperature": 1.0, "pass_k": [2],
                            "max_prompts": 4})
    test = str(tmp_path / "data" / "rl_test.parquet")
    run_steps([{"module": "pipeline_lib.jobs.engines.local.sft",
                "args": ["--spec", RunSpec(method="sft", task="arith_tiny", engine="local", model=spec.pop("model"),
                                           sft=SFTSettings.from_flat(spec, "local")).to_json(),
                         "--data", str(tmp_path / "data" / "sft_train.parquet"),
                         "--tokenizer", str(tmp_path / "tok"), "--run-dir", str(tmp_path / "sft"), "--seed", "0",
                         "--eval-data", test, "--eval-spec", eval_spec, "--eval-out", str(tmp_path / "eval_in")]}])
    assert eval_main(["--model", str(tmp_path / "sft" / "final"), "--data", test, "--spec", eval_spec,
                      "--out", str(tmp_path / "eval_apart")]) == 0
    for name in ("metrics.json", "generations.jsonl"):
        assert (tmp_path / "eval_in" / name).read_text() == (tmp_path / "eval_apart" / name).read_text()
    # the batch's sidecars record the code of the step that wrote them, so the audit checks the right modules
    batched = json.loads((tmp_path / "sft" / "DONE.json.prov.json").read_text())["code_digest"]
    assert batched["entry"] == "pipeline_lib.jobs.engines.local.sft"
    assert "pipeline_lib/jobs/engines/local/sft.py" in batched["modules"]


def _default_config():
    import yaml

    from pipeline_lib.core.config import validate_config
    from tests.conftest import REPO

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    return validate_config(config, REPO / "workflow/schemas/config.schema.yaml")


def _steps(command):
    """The steps of a batch command: its --steps names a JSON file (pipeline_lib.core.cli.json_file), not inline JSON,
    and
    that file is one JSON document: each spec a JSON value in it, no JSON text quoted in a string."""
    assert len(command) < 300 and "{" not in command, command
    steps = json.loads(json_text(shlex.split(command)[-1]))
    quoted = [arg for step in steps for arg in step["args"] if isinstance(arg, str) and arg.lstrip()[:1] in "{["]
    assert not quoted, quoted[:1]
    assert all(isinstance(step["args"][step["args"].index("--spec") + 1], dict) for step in steps)
    return steps


def test_one_eval_job_per_task_and_seed_runs_each_checkpoint_as_its_own_evaluation(tmp_path, monkeypatch):
    """Every evaluation of a local-engine (task, seed) shares one process; each keeps its own outputs and arguments."""
    monkeypatch.chdir(tmp_path)  # the commands write their steps files under .snakemake/specs here
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.groups import eval_batch_command, eval_batches
    from pipeline_lib.plan.targets import stage_targets, validation_evaluations

    config = _default_config()
    evaluations = stage_targets(config, plan_runs(config))["eval"]
    batches = {batch.name: batch for batch in eval_batches(plan_runs(config), evaluations)}
    # a variant run's held-out validation evaluation (rule eval_validation) and the transfer ones keep their own jobs
    own_jobs = set(validation_evaluations(config, plan_runs(config)))
    assert own_jobs and own_jobs <= set(evaluations)
    assert sorted(path for batch in batches.values() for path in batch.paths("eval", "metrics.json")) == sorted(
        path for path in evaluations if not path.startswith("results/eval/transfer/") and path not in own_jobs)
    assert batches["arith_tiny_seed2"].methods == ("sft", *config["train"]["methods"])
    countdown = batches["countdown_tiny_seed0"].methods  # the baselines and ablation cells run on this task and seed
    assert {"sft", "base", "rationalization", "softmax_tau10_m4", *config["train"]["methods"]} <= set(countdown)
    batch = batches["arith_tiny_seed2"]
    steps = _steps(eval_batch_command(config, batch, 1))
    assert [s["module"] for s in steps] == ["pipeline_lib.jobs.eval.evaluate"] * len(batch.methods)
    assert [s["args"][s["args"].index("--out") + 1] for s in steps] == [
        f"results/eval/arith_tiny/{m}/seed2" for m in batch.methods]
    assert all(s["args"][s["args"].index("--seed") + 1] == "2" for s in steps)
    # a verl-trained task's evaluations keep one job each
    config["train"]["engine"] = "verl"
    # its row states what verl computes over the miniature's shared block (group-token-mean is local only)
    config["train"]["task_settings"] = {"arith_tiny": {"rl": {"aggregation": "token-mean"}}}
    assert "arith_tiny" not in {batch.task for batch in eval_batches(plan_runs(config, check_estimators=False),
                                                                     evaluations)}


def test_a_training_group_runs_exactly_its_members_own_commands(tmp_path, monkeypatch):
    """train_local_group runs each train.methods run of a (task, seed) as the step its own job would run."""
    monkeypatch.chdir(tmp_path)
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.groups import groups, train_group_command, train_group_inputs

    config = _default_config()
    plan = plan_runs(config)
    methods = groups(plan).methods
    runs = groups(plan).runs(plan, "countdown_tiny", 1)
    assert [run.name for run in runs] == list(methods) and {run.seed for run in runs} == {1}
    steps = _steps(train_group_command(runs, 3))
    for run, step in zip(runs, steps, strict=True):
        alone = shlex.split(run.command(3, files=False))
        assert alone[:3] == ["python", "-m", step["module"]] and alone[3:] == argv(step["args"])
    inputs = train_group_inputs(runs)
    assert sorted(set(inputs.values())) == sorted({p for run in runs for p in run.inputs.values()})
    assert "results/train/countdown_tiny/sft/seed1/DONE.json" in inputs.values()


def test_the_ablation_cells_of_a_task_and_seed_form_one_training_group():
    """train_ablation_group: every tau x M cell of each ablation (task, seed), from that seed's SFT model."""
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.groups import ablation_groups, train_group_inputs

    config = _default_config()
    ablation = config["train"]["ablation"]
    group = ablation_groups(plan_runs(config))
    assert group.tasks == tuple(ablation["tasks"]) and group.seeds == tuple(ablation["seeds"])
    assert len(group.methods) == len(ablation["taus"]) * len(ablation["group_sizes"])
    runs = group.runs(plan_runs(config), group.tasks[0], group.seeds[0])
    assert {run.spec.settings["steps"] for run in runs} == {ablation["steps"]}
    sft = f"results/train/{group.tasks[0]}/sft/seed{group.seeds[0]}/DONE.json"
    assert sft in train_group_inputs(runs).values()
    config["train"]["ablation"]["tasks"] = []
    assert ablation_groups(plan_runs(config)).methods == ()


def test_imagenet_runs_of_one_seed_share_a_job_only_when_asked(tmp_path, monkeypatch):
    """imagenet.one_job_per_seed: the study's runs of a seed as one batch of their own commands; off, none."""
    monkeypatch.chdir(tmp_path)
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.groups import imagenet_groups, train_group_command

    config = _default_config()
    section = config["imagenet"]
    assert section["one_job_per_seed"] is True  # the tiny default groups them
    plan = plan_runs(config)
    group = imagenet_groups(config, plan)
    assert group.job == "train_imagenet" and group.tasks == ("imagenet",) and group.seeds == tuple(section["seeds"])
    runs = group.runs(plan, "imagenet", group.seeds[-1])
    assert {run.output for run in runs} == {run.output for run in plan.of(job="train_imagenet")
                                            if run.seed == group.seeds[-1]}
    for run, step in zip(runs, _steps(train_group_command(runs, 2)), strict=True):
        alone = shlex.split(run.command(2, files=False))
        assert alone[:3] == ["python", "-m", step["module"]] and alone[3:] == argv(step["args"])
    section["one_job_per_seed"] = False
    assert imagenet_groups(config, plan_runs(config)).seeds == ()


def test_job_priorities_start_what_unlocks_the_most_work_first():
    """On 2 cores the order decides the tail: every SFT run outranks the runs started from it, training outranks
    the evaluations, the ImageNet study (nothing but its own table waits on it) ranks below them but above the
    tables, so it fills a core while the main study is busy instead of running alone at the end (30 s beside
    tables of 1-5 s), and the theory's Monte Carlo is the last filler."""
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.groups import imagenet_groups, job_priority

    config = _default_config()
    plan = plan_runs(config)
    sft = {job_priority(run.job, run) for run in plan.runs if run.name == "sft"}
    started_from_sft = {job_priority(run.job, run) for run in plan.runs
                        if any("/sft/" in path for path in run.inputs.values()) and run.job != "train_imagenet"}
    assert sft and started_from_sft and min(sft) > max(started_from_sft)
    assert min(job_priority("data_tiny"), job_priority("data_tokenizer")) > max(sft)  # every run waits on the data
    evaluation = job_priority("eval_checkpoints_countdown_tiny_seed0")
    assert min(started_from_sft) > evaluation > job_priority("paper_table1")
    imagenet = imagenet_groups(config, plan)
    assert imagenet.seeds  # the tiny default runs the study
    tables = min(job_priority("paper_table1"), job_priority("judge_score"), job_priority("paper_reproduction_report"))
    assert evaluation > job_priority("train_imagenet_group") > tables > job_priority("paper_theory_data")


def test_a_prompt_pool_is_a_seeded_subset_and_null_is_every_prompt():
    """train.rl.prompt_pool: the rows a local RL run draws from, drawn with the run's seed; None keeps every row (the
    paper, and the order of every run before the key existed)."""
    from pipeline_lib.jobs.engines.local.rl import prompt_pool

    assert prompt_pool(50, None, 3) == list(range(50)) and prompt_pool(50, 60, 3) == list(range(50))
    pool = prompt_pool(2000, 80, 0)
    assert len(set(pool)) == 80 and pool == sorted(pool) and max(pool) < 2000
    assert prompt_pool(2000, 80, 0) == pool and prompt_pool(2000, 80, 1) != pool
