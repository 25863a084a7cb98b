"""The run plan: the method registry, the one list of runs, parameter precedence, the plan command, and what adding
a method takes."""

import shutil
import subprocess
import sys

import pytest
import yaml

from pipeline_lib.core.config import validate_config
from pipeline_lib.jobs.engines.verl.planned import plan_overrides, run_overrides
from pipeline_lib.plan import METHOD_LABELS, METHODS, PlanError, plan_runs
from pipeline_lib.plan.settings import estimator_params
from pipeline_lib.plan.table import main as plan_command
from pipeline_lib.plan.targets import stage_targets
from tests.conftest import REPO, WORKFLOW_PARTS, repo_env, snakemake

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def load(name: str) -> dict:
    return validate_config(yaml.safe_load((REPO / "config" / name).read_text()), SCHEMA)


def _sentinel(path: str) -> str:
    """The training run an evaluation path reads."""
    parts = path.split("/")
    task, method, seed = parts[-4:-1] if parts[2] == "transfer" else parts[2:5]
    return f"results/train/{task}/{method}/{seed}/DONE.json"


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_every_target_and_every_run_it_starts_from_is_planned_once(name):
    config = load(name)
    plan = plan_runs(config)
    outputs = [run.output for run in plan.runs]
    assert len(outputs) == len(set(outputs))
    planned = set(outputs)
    assert set(plan.train_targets) <= planned
    for run in plan.runs:  # every run a job starts from is itself a planned job
        assert all(p in planned for p in run.inputs.values() if p.startswith("results/train/")), run.key
    evaluated = {_sentinel(p) for p in stage_targets(config, plan)["eval"]}
    assert evaluated <= planned, sorted(evaluated - planned)[:5]


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_each_study_names_its_runs_by_fields_that_are_the_planned_runs_identity(name):
    """A request's task, name and seed are the planned run's own (ImageNet's run names hold a slash, so no split of
    the path could recover them); the target lists select by these fields."""
    config = load(name)
    if name == "config.yaml":
        config["imagenet"] |= {"enabled": True, "objectives": ["ml", "softmax"], "group_sizes": [4], "seeds": [0],
                               "lr": 0.1, "tau": 0.1}
    plan = plan_runs(config)
    by_output = {run.output: run for run in plan.runs}
    requests = [r for study in plan.requests.values() for r in study]
    assert {r.study for r in requests} >= {"main", "imagenet"}
    for request in requests:
        run = by_output[request.path]
        assert (request.task, request.name, request.seed) == (run.task, run.name, run.seed), request
    assert any("/" in r.name for r in plan.requests["imagenet"])


def test_paper_plan_takes_tau_from_the_task_rows_and_the_compute_setup_from_the_config():
    plan = plan_runs(load("paper.yaml"))
    verl = plan.of(engine="verl", job="train_verl")
    # 70 of the paper (no SFT at 3B: the scale study's RL runs start from Qwen2.5-3B itself) + 2 ESS + RL-Logit's
    # second reward variant on its 3 tasks
    assert len(verl) == 75 and all(run_overrides(run) and run.after for run in verl)
    spec = {run.key: run.spec for run in verl}
    assert spec["gsm8k/softmax_exact/seed0"].tau == 0.1 and spec["deepmath/softmax_exact/seed0"].tau == 0.3
    assert spec["poetry/softmax_sim/seed0"].tau == 0.3 and spec["gsm8k/grpo_exact/seed0"].tau is None
    assert spec["countdown/softmax_tau1p3_m4/seed0"].estimator.params == {"tau": 1.3}
    assert spec["countdown/softmax_tau1p3_m4/seed0"].settings["group_size"] == 4
    assert "+algorithm.tau=0.3" in run_overrides(plan.get("train_verl", "deepmath/softmax_exact/seed0"))
    assert "poetry/grpo_exact/seed0" not in spec  # the non-verifiable tasks train the -Sim pair only
    resources = {run.key: run.resources for run in verl}
    assert resources["deepmath/softmax_exact/seed0"] == {"nodes": 2, "gres": "gpu:8"}
    assert resources["gsm8k/opd/seed0"] == resources["gsm8k/grpo_exact/seed0"]  # the teacher inside the allocation
    assert {run.job for run in plan.runs} == {"train_verl", "train_trl", "annotate_rationales", "train_local",
                                              "train_imagenet"}
    assert {run.method for run in plan.of(job="train_local")} == {"base"}  # Base copies the pretrained model


def _model_path(run) -> str:
    return next(o.split("=", 1)[1] for o in run_overrides(run) if o.startswith("actor_rollout_ref.model.path="))


def test_paper_rl_runs_start_from_the_base_model_and_iterative_dpo_from_sft():
    """App. B's tables give Qwen/Qwen2.5-1.5B as the RL runs' base model and start only Iterative DPO from the SFT
    checkpoint: every verl RL run (GRPO/SoftmaxGRPO, the ablation, RL-Logit, RARO, OPD) loads the hub model itself
    and waits for no SFT run; the scale study's from Qwen/Qwen2.5-3B, with no SFT at 3B planned."""
    config = load("paper.yaml")
    assert config["train"]["rl_start"] == "base"
    plan = plan_runs(config)
    rl = [run for run in plan.of(job="train_verl") if run.verl_kind == "rl"]
    assert {run.method for run in rl} >= {"grpo_exact", "grpo_sim", "softmax_exact", "softmax_sim", "softmax_ess",
                                          "rl_logit", "raro", "opd"}
    for run in rl:
        hub = "Qwen/Qwen2.5-3B" if run.name.endswith("_at_qwen25_3b") else "Qwen/Qwen2.5-1.5B"
        assert "init" not in run.inputs and "--init" not in run.args, run.key
        assert _model_path(run) == run.spec.model == hub, run.key
        assert not any("/sft" in path for path in run.inputs.values()), run.key
    assert sum(run.name.endswith("_at_qwen25_3b") for run in rl) == 4
    assert not [run for run in plan.runs if run.name.startswith("sft_at_")]
    dpo = plan.of(job="train_trl")
    assert dpo and all(run.inputs["init"] == f"results/train/{run.task}/sft/seed0/DONE.json" for run in dpo)
    assert all(f"results/train/{run.task}/sft/seed0/final" in run.args for run in dpo)


def test_rl_start_sft_starts_every_rl_run_from_its_seeds_sft_model_as_the_miniature_does():
    """``train.rl_start: sft`` (the tiny default's value, whose base model is untrained) starts every RL run from the
    seed's SFT model, the scale study's from SFT at that scale; on the local engine ``base`` starts them from the
    Base run's model; Iterative DPO starts from SFT either way."""
    paper = load("paper.yaml")
    paper["train"]["rl_start"] = "sft"
    plan = plan_runs(paper)
    for run in (run for run in plan.of(job="train_verl") if run.verl_kind == "rl"):
        start = "sft_at_qwen25_3b" if run.name.endswith("_at_qwen25_3b") else "sft"
        assert run.inputs["init"] == f"results/train/{run.task}/{start}/seed0/DONE.json", run.key
        assert _model_path(run).endswith(f"/results/train/{run.task}/{start}/seed0/final"), run.key
    assert len([run for run in plan.runs if run.name == "sft_at_qwen25_3b"]) == 2

    tiny = load("config.yaml")
    assert tiny["train"]["rl_start"] == "sft"
    for rl_start, start in (("sft", "sft"), ("base", "base")):
        tiny["train"]["rl_start"] = rl_start
        runs = plan_runs(tiny).of(job="train_local")
        rl = [run for run in runs if METHODS.get(run.method) is not None and run.name != "opd_teacher"
              and (METHODS[run.method].family == "group_rl" or run.method in ("rl_logit", "raro", "opd"))]
        assert rl and all(run.inputs["init"] == f"results/train/{run.task}/{start}/seed{run.seed}/DONE.json"
                          for run in rl), rl_start
        dpo = [run for run in runs if run.method == "iterative_dpo"]
        assert dpo and all(run.inputs["init"].endswith("/sft/seed0/DONE.json") for run in dpo)


def test_tau_has_one_stated_precedence_cell_then_task_row_then_method_entry():
    """The precedence of :func:`pipeline_lib.plan.settings.estimator_params`: an ablation cell's tau > the task's row
    > the method's entry; where none sets it, the error names where it may be set."""
    config = load("paper.yaml")
    for name in ("softmax_exact", "softmax_sim"):
        config["train"]["methods"][name]["tau"] = 0.7  # deepmath's row says 0.3
    del config["train"]["task_settings"]["gsm8k"]["tau"]
    taus = {(r.task, r.name): r.spec.tau for r in plan_runs(config).runs}
    assert taus["deepmath", "softmax_exact"] == 0.3  # the row over the method entry
    assert taus["gsm8k", "softmax_exact"] == 0.7  # no row tau: the method entry's
    assert taus["countdown", "softmax_tau1p3_m4"] == 1.3  # the ablation cell over the row (countdown's: 0.1)
    assert estimator_params(config, "deepmath", "softmax_exact", tau=2.0) == {"tau": 2.0}
    del config["train"]["methods"]["softmax_exact"]["tau"], config["train"]["methods"]["softmax_sim"]["tau"]
    with pytest.raises(PlanError, match=r"takes tau, but neither train.methods.softmax_exact.tau nor "
                                        r"train.task_settings.gsm8k.tau is set"):
        plan_runs(config)
    with pytest.raises(PlanError, match="takes none"):
        estimator_params(config, "gsm8k", "grpo_exact", tau=2.0)


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m["grpo_exact"].update(tau=0.1), r"'grpo' .*unknown parameter\(s\) \['tau'\]"),
    (lambda m: m["softmax_exact"].pop("tau"), r"'softmax' estimator, which takes tau, but .*softmax_exact.tau"),
    (lambda m: m["grpo_exact"].update(advantage="rloo"), r"train.methods.grpo_exact.advantage is 'rloo'"),
    (lambda m: m.update(mystery={"advantage": "grpo", "reward": "verifier"}), r"'mystery' is not registered"),
])
def test_a_method_entry_is_checked_against_the_registry_and_the_advantage_registry(change, message):
    config = load("config.yaml")
    change(config["train"]["methods"])
    with pytest.raises(PlanError, match=message):
        plan_runs(config)


def test_table_labels_come_from_the_registry():
    from pipeline_lib.paper import results

    assert results.METHOD_LABELS is METHOD_LABELS and list(METHODS) == results.METHOD_ORDER
    assert METHOD_LABELS["softmax_exact"] == "SoftmaxGRPO-Exact" and METHOD_LABELS["iterative_dpo"] == "Iterative DPO"


def test_plan_command_prints_the_run_table(capsys):
    assert plan_command(["--configfile", str(REPO / "config/paper.yaml")]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("deepmath ") and " softmax_exact " in line)
    assert " train_verl " in row and " tau=0.3 " in row and "nodes=2,gres=gpu:8" in row and " 3220 " in row
    assert "100 training runs in 100 Snakemake training jobs: annotate_rationales 3, train_imagenet 13, " \
           "train_local 6, train_trl 3, train_verl 75" in out


def test_plan_command_names_the_group_job_that_trains_a_run_and_counts_jobs_not_runs(capsys):
    """The tiny default trains most runs inside group jobs (one per task and seed): the table names that rule, and
    the count is of the jobs Snakemake runs, each group's runs in brackets."""
    assert plan_command(["--configfile", str(REPO / "config/config.yaml")]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("arith_tiny ") and " grpo_exact " in line)
    assert " train_local_group " in row
    from pipeline_lib.plan.groups import train_groups

    config = load("config.yaml")
    plan, group = plan_runs(config), train_groups(config, plan_runs(config))["train_local_group"]
    jobs = len(group.tasks) * len(group.seeds)
    count = next(line for line in out.splitlines() if "training runs in" in line)
    assert count.startswith(f"{len(plan.runs)} training runs in ") and "Snakemake training jobs" in count
    assert int(count.split(" training runs in ")[1].split()[0]) < len(plan.runs)
    assert f"train_local_group {jobs} ({jobs * len(group.methods)} runs)" in count


def test_plan_table_prices_each_run_in_gpu_hours_from_the_slurm_profile(capsys, tmp_path):
    """GPUs (nodes x gres GPUs, or gpu) x the profile's first-attempt time limit, per run and in total; a run of a
    group job is priced by its group's rule (the tiny default's ImageNet runs: a CPU group job)."""
    from pipeline_lib.plan.table import gpu_hours, load_profile, plan_gpu_hours

    assert plan_command(["--configfile", str(REPO / "config/paper.yaml")]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    rows = [line.split() for line in out.splitlines()[2:]
            if line and not line.startswith(("-", "GPU", "Disk", "100 training runs"))]
    deepmath = next(r for r in rows if r[0] == "deepmath" and r[1] == "softmax_exact")
    assert header[-1] == "gpu_h" and deepmath[-1] == "768"  # 2 nodes x 8 GPUs x site.max_runtime_min 2880
    sft = next(r for r in rows if r[0] == "gsm8k" and r[1] == "sft")
    assert sft[-1] == "384"
    total = next(line for line in out.splitlines() if line.startswith("GPU-hours estimated"))
    assert header[-7:] == ["resources", "est_gpu_h", "attempts", "ckpt_every", "mem_gb", "disk_gb", "gpu_h"]
    meetingbank = next(r for r in rows if r[0] == "meetingbank" and r[1] == "grpo_sim")
    assert int(meetingbank[-5]) > 1 and float(meetingbank[-3]) <= 80  # resubmissions; bounded by tokens
    assert "Disk estimated" in out and "GPU-hours requested" not in out  # the cost line leads with the estimate
    assert "(requested 34,956) in total" in total and "seed 0 " in total and "(requested 34,956);" in total
    main = [r for r in rows if r[6] == "main"]
    assert len(main) == 26 and f"(requested {sum(int(r[-1]) for r in main):,})" in total
    # the estimate: each run's est_gpu_h where the plan sizes it, its request where not (named in the line)
    from pipeline_lib.plan.estimates import estimates

    paper = load("paper.yaml")
    paper_plan = plan_runs(paper)
    found = estimates(paper, paper_plan)
    asked = plan_gpu_hours(paper, paper_plan, load_profile(REPO / "profiles/slurm/config.yaml"))
    sized = {key for key, e in found.items() if e.gpu_hours is not None}
    work = [found[r.job, r.key].gpu_hours if (r.job, r.key) in sized else h
            for r, h in zip(paper_plan.runs, asked, strict=True)]
    main_work = sum(w for r, w in zip(paper_plan.runs, work, strict=True) if r.study == "main")
    unsized = [h for r, h in zip(paper_plan.runs, asked, strict=True) if (r.job, r.key) not in sized and h > 0]
    assert f"counted): {sum(work):,.0f} (requested 34,956) in total" in total
    assert f"main {main_work:,.0f} (requested" in total and f"{len(unsized)} GPU jobs not estimated" in total
    assert abs(sum(work) - sum(asked)) > 1  # the estimate, not the request under another name

    config, profile = load("paper.yaml"), load_profile(REPO / "profiles/slurm/config.yaml")
    plan = plan_runs(config)
    hours = plan_gpu_hours(config, plan, profile)
    assert sum(hours) == pytest.approx(34_956)
    shorter = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())
    shorter["set-resources"]["train_verl"]["runtime"] = "1440 * attempt"  # a profile value wins
    (tmp_path / "slurm.yaml").write_text(yaml.safe_dump(shorter))
    halved = plan_gpu_hours(config, plan, load_profile(tmp_path / "slurm.yaml"))
    verl = [i for i, run in enumerate(plan.runs) if run.job == "train_verl"]
    assert all(hours[i] == (768 if plan.runs[i].resources["nodes"] == 2 else 384) for i in verl)
    assert all(halved[i] == hours[i] / 2 for i in verl)
    shorter["set-resources"]["train_verl"]["runtime"] = "one day"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(shorter))
    with pytest.raises(ValueError, match=r"set-resources\.train_verl\.runtime: 'one day'"):
        gpu_hours(plan.runs[verl[0]], load_profile(tmp_path / "bad.yaml"))

    two_seeds = dict(config, train={**config["train"], "seeds": [0, 1]})  # the price of a second seed (config/README)
    two_plan = plan_runs(two_seeds)
    second = [h for run, h in zip(two_plan.runs, plan_gpu_hours(two_seeds, two_plan, profile), strict=True)
              if run.seed == 1]
    assert sum(second) == 14_976

    tiny = load("config.yaml")
    tiny_plan = plan_runs(tiny)
    imagenet = [i for i, run in enumerate(tiny_plan.runs) if run.job == "train_imagenet"]
    assert imagenet and tiny["imagenet"]["one_job_per_seed"]
    assert gpu_hours(tiny_plan.runs[imagenet[0]], profile) == 48  # alone: one GPU x site.max_runtime_min
    assert sum(plan_gpu_hours(tiny, tiny_plan, profile)) == 0  # but it runs in train_imagenet_group, a CPU job


def test_dry_run_names_the_run_whose_verl_override_key_is_misspelt(tmp_path):
    from pipeline_lib.jobs.engines.verl.validate import VerlOverrideError, check_override_keys

    config = load("paper.yaml")
    config["train"]["verl"]["extra_overrides"]["rl"] = ["actor_rollout_ref.rollout.temperture=1.0"]
    runs = plan_overrides(plan_runs(config))
    with pytest.raises(VerlOverrideError, match=r"train run gsm8k/grpo_exact/seed0: .*temperture"):
        check_override_keys(runs, cache_dir=tmp_path)
    good = [(key, kind, [o for o in overrides if "temperture" not in o]) for key, kind, overrides in runs]
    assert check_override_keys(good, cache_dir=tmp_path)["composed"] == 2  # one compose per trainer config
    assert check_override_keys(good, cache_dir=tmp_path)["cached"]


def test_plain_snakemake_runs_the_tiny_default_from_the_default_profile(workflow_copy):
    result = snakemake(workflow_copy, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "train_local" in result.stdout and "train_verl" not in result.stdout


@pytest.mark.slow
def test_adding_a_registered_advantage_as_a_method_is_one_registry_entry_and_one_config_entry(tmp_path):
    """Dr.GRPO (registered in pipeline_lib.core.rl.advantages and mapped to verl) as a new RL method: one line in the
    method
    registry, one entry under train.methods; nothing under workflow/ changes, and both engines plan its runs."""
    package = tmp_path / "pkg"
    shutil.copytree(REPO / "pipeline_lib", package / "pipeline_lib", ignore=shutil.ignore_patterns("__pycache__"))
    registry = package / "pipeline_lib/plan/registry.py"
    anchor = '    group_rl("softmax_ess", "SoftmaxGRPO-ESS", "softmax_ess", "verifier"'
    text = registry.read_text()
    assert anchor in text
    new = '    group_rl("dr_grpo_exact", "Dr.GRPO-Exact", "dr_grpo", "verifier"),\n'
    registry.write_text(text.replace(anchor, new + anchor))
    workflow = tmp_path / "wf"
    workflow.mkdir()
    for part in WORKFLOW_PARTS:
        (shutil.copytree if (REPO / part).is_dir() else shutil.copy2)(REPO / part, workflow / part)
    env = repo_env() | {"PYTHONPATH": str(package)}
    for name in ("config.yaml", "paper.yaml"):
        config = load(name)  # with the schema's defaults: paper.yaml takes train.methods from them
        config["train"]["methods"]["dr_grpo_exact"] = {"advantage": "dr_grpo", "reward": "verifier"}
        (workflow / f"new_{name}").write_text(yaml.safe_dump(config))
        result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--configfile", f"new_{name}"],
                                cwd=workflow, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        # the plan lists its runs (the dry run's console prints one short line per job, not their commands)
        listing = subprocess.run([sys.executable, "-m", "pipeline_lib", "plan", "--configfile", f"new_{name}"],
                                 cwd=workflow, env=env, capture_output=True, text=True, timeout=300)
        assert listing.returncode == 0, listing.stderr[-3000:]
        task = "countdown_tiny" if name == "config.yaml" else "gsm8k"
        row = next(line.split() for line in listing.stdout.splitlines()
                   if line.split()[:4] == [task, "dr_grpo_exact", "dr_grpo_exact", "0"])
        # its own job on verl; on the local engine a step of its (task, seed)'s train_local_group batch
        assert row[5] == ("train_verl" if name == "paper.yaml" else "train_local_group") and row[7] == "dr_grpo"
    labels = subprocess.run([sys.executable, "-c", "from pipeline_lib.paper.results import METHOD_LABELS as L; "
                             "print(L['dr_grpo_exact'])"], cwd=workflow, env=env, capture_output=True, text=True,
                            timeout=300)
    assert labels.stdout.strip() == "Dr.GRPO-Exact"
    for path in (REPO / "workflow").rglob("*"):  # the copy's workflow/ is the repository's, unedited
        if path.is_file():
            assert (workflow / path.relative_to(REPO)).read_bytes() == path.read_bytes()


def test_every_planned_spec_crosses_the_process_boundary_unchanged_and_a_bad_one_is_named():
    from pipeline_lib.plan import Estimator, RunSpec

    for name in ("config.yaml", "paper.yaml"):
        for run in plan_runs(load(name), check_estimators=False).runs:
            assert RunSpec.from_json(run.spec.to_json()) == run.spec, run.key
            assert run.args[run.args.index("--spec") + 1] == run.spec.to_json()  # the command carries exactly it
    with pytest.raises(PlanError, match=r"unknown field\(s\) \['advantage_params'\]"):
        RunSpec.from_json('{"method": "grpo_exact", "task": "t", "engine": "local", "advantage_params": {}}')
    with pytest.raises(PlanError, match="engine 'slurm' is not one of"):
        RunSpec(method="grpo_exact", task="t", engine="slurm")
    with pytest.raises(PlanError, match="non-finite"):
        RunSpec(method="softmax_exact", task="t", engine="local", estimator=Estimator("softmax", {"tau": float("nan")}))
