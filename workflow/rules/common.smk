# Shared wiring: the run plan and target lists (built and tested in pipeline_lib.plan / pipeline_lib.targets), the config
# digest recorded in every provenance sidecar, and wildcard constraints.
import hashlib
import json
import os
import sys

from pipeline_lib.provenance import code_digest, config_digest
from pipeline_lib.run_info import write_run_info
from pipeline_lib.plan import JOBS, VERL_CHECKED, plan_runs
from pipeline_lib.plan.groups import ablation_groups, eval_batches, groups, imagenet_groups
from pipeline_lib.paper.captions import ablation_differences
from pipeline_lib.specs import tiny_task_spec
from pipeline_lib.targets import (
    ADAPTIVE_OUTPUTS,
    ablation_eval_targets,
    adaptive_comparison,
    report_inputs,
    rl_runs,
    runs_of,
    scale_eval_targets,
    stage_targets,
    table1_eval_targets,
)

CONFIG_SHA256 = config_digest(config)
# Every job's shell (local or on a Slurm node) exports the digest; provenance sidecars record it.
shell.prefix(f"export PIPELINE_CONFIG_SHA256={CONFIG_SHA256}; ")


report: "../report/workflow.rst"


onstart:
    write_run_info(config)

# The run plan: every training job, its inputs, command, spec and resources (python -m pipeline_lib plan prints it).
# (the estimators' parameter check runs in the submitting process, not again in each Slurm job's own parse)
PLAN = plan_runs(config, check_estimators=workflow.is_main_process)
# Runs of one (task, seed) that share a process: the main study's (rule train_local_group), the ablation's cells
# (train_ablation_group), the ImageNet study's of one seed (train_imagenet_group); and every evaluation of one
# (task, seed) of a local-engine task, one process each (eval.smk; pipeline_lib.plan.groups).
GROUPS = groups(config)
ABLATION_GROUPS = ablation_groups(PLAN)
IMAGENET_GROUPS = imagenet_groups(config, PLAN)
TARGETS = stage_targets(config, PLAN)
EVAL_BATCHES = eval_batches(config, TARGETS["eval"])
REPORT_INPUTS = report_inputs(config, PLAN, TARGETS["paper"])

# verl runs: every override of every run must parse and name a key of verl's config, so a typo fails `snakemake -n`
# (about a second, cached by content); verl's full checks run in the local job validate_verl (train.smk).
# The verl engine translates each run's spec into its overrides (pipeline_lib.engines.verl.translate).
from pipeline_lib.engines.verl.translate import plan_overrides

VERL_RUNS = plan_overrides(PLAN)
VERL_RUNS_DIGEST = hashlib.sha256(json.dumps(VERL_RUNS).encode()).hexdigest()
if VERL_RUNS:
    from pipeline_lib.engines.verl.validate import check_override_keys

    print(f"verl override keys checked: {check_override_keys(VERL_RUNS)}", file=sys.stderr)


wildcard_constraints:
    task="[a-z0-9_]+",
    method="[a-z0-9_]+",
    seed="[0-9]+",

# One command for both dataset rules (they differ only in the files countdown adds).
DATA_BUILD_COMMAND = (
    "python -m pipeline_lib.data.build real --dataset {wildcards.dataset} --spec {params.spec:q}"
    " --out-dir {params.out_dir} > {log} 2>&1"
)
