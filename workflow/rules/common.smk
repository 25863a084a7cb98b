# Shared wiring: the run plan, and what every rule reads off it (pipeline_lib.plan, .targets, .steps: built and tested
# there; rules name no method or task), the config digest recorded in every provenance sidecar, wildcard constraints.
import hashlib
import json
import os
import sys

from pipeline_lib.core.data.tiny import TASKS as TINY_TASKS
from pipeline_lib.plan import JOBS, VERL_CHECKED, plan_runs
from pipeline_lib.plan.groups import eval_batches, pattern, train_groups
from pipeline_lib.plan.hub import offline_exports
from pipeline_lib.core.provenance import code_digest, config_digest, resolved_config_file
from pipeline_lib.core.run_info import write_run_info
from pipeline_lib.paper.steps import data_params, dataset_pattern, eval_params, judge_inputs, judge_params, paper_steps
from pipeline_lib.plan.targets import stage_targets, tokenizer_inputs

CONFIG_SHA256 = config_digest(config)
# Every job's shell (local or on a Slurm node) exports the digest, and the resolved config's file; provenance sidecars
# record the digest and the settings their step read (pipeline_lib.core.provenance.step_config), which the audit compares.
# Every job reads the hub offline from HF_HOME (site.hf_home), which the local rule `fetch` fills (site.smk).
# (the prefix is set below, once the plan's hub repositories are known)


report: "../report/workflow.rst"


onstart:
    check_hub_lock(HUB_REPOS, HUB_LOCK, workflow.configfiles, dry_run=False)
    write_run_info(config, workflow.dag.dot())

# The run plan: every training job, its inputs, command, spec and resources (python -m pipeline_lib plan prints it).
# (the estimators' parameter check runs in the submitting process, not again in each Slurm job's own parse)
PLAN = plan_runs(config, check_estimators=workflow.is_main_process)
TARGETS = stage_targets(config, PLAN)
# Runs sharing a process (pipeline_lib.plan.groups): the main study's of one (task, seed) (train_local_group), the
# ablation's cells (train_ablation_group), the ImageNet study's of one seed (train_imagenet_group); and every
# evaluation of one (task, seed) of local-engine checkpoints (eval.smk).
TRAIN_GROUPS = train_groups(config, PLAN)
EVAL_BATCHES = eval_batches(PLAN, TARGETS["eval"])
PAPER_STEPS = paper_steps(config, PLAN, TARGETS["paper"])

# verl runs: every override of every run must parse and name a key of verl's config, so a typo fails `snakemake -n`
# (about a second, cached by content); verl's full checks run in the local job validate_verl (train.smk).
# The verl engine translates each run's spec into its overrides (pipeline_lib.jobs.engines.verl.translate), the plan's
# runs all at once in pipeline_lib.jobs.engines.verl.planned.
from pipeline_lib.jobs.engines.verl.planned import plan_overrides

VERL_RUNS = plan_overrides(PLAN)
VERL_RUNS_DIGEST = hashlib.sha256(json.dumps(VERL_RUNS).encode()).hexdigest()
if VERL_RUNS:
    from pipeline_lib.jobs.engines.verl.checks import check_override_keys

    print(f"verl override keys checked: {check_override_keys(VERL_RUNS)}", file=sys.stderr)


wildcard_constraints:
    task="[a-z0-9_]+",
    method="[a-z0-9_]+",
    seed="[0-9]+",

# The site steps (`fetch`, `gpu_canary`: site.smk) and what the other rules read of them: every hub repository the
# plan reads (pipeline_lib.plan.hub), the canary before each GPU job, `fetch` before each job reading the hub.
from pipeline_lib.plan.hub import HUB_LOCK, hf_home, hub_repos, reads_hub
from pipeline_lib.plan.site import check_hub_lock, home_warnings, link_results_root
from pipeline_lib.plan.site import canary_inputs, fetch_inputs

HUB_REPOS = hub_repos(config, PLAN)
HF_HOME = hf_home(config)
shell.prefix(f"export PIPELINE_CONFIG_SHA256={CONFIG_SHA256} PIPELINE_CONFIG_FILE={resolved_config_file(config)}; "
             + offline_exports(config, HUB_LOCK if HUB_REPOS else None))
# Hub revisions pinned (pipeline_lib.plan.hub.HUB_LOCK): a run whose plan reads a repository the lock does not hold
# at the revision its config asks is refused before any job starts (onstart: a dry run never gets there), naming each,
# until relocked on purpose; the plan (a dry run included) warns the same (the tiny default reads no hub: no lock).
if HUB_REPOS and workflow.is_main_process:
    check_hub_lock(HUB_REPOS, HUB_LOCK, workflow.configfiles, dry_run=True)
# The site block (config/paper.yaml `site:`): results/ linked to site.results_root, and a warning for every large store
# a default puts under $HOME (pipeline_lib.plan.site).
if workflow.is_main_process:
    link_results_root(config)
    for line in home_warnings(config, PLAN, HUB_REPOS, workflow.deployment_settings.conda_prefix, HF_HOME):
        print(f"WARNING (site): {line}", file=sys.stderr)
after_canary = canary_inputs(lambda rule: workflow.get_rule(rule).resources, ancient)  # after_canary(rule)
after_fetch = fetch_inputs(HUB_REPOS, ancient)


include: "site.smk"
