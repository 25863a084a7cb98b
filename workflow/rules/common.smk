# Shared wiring: the run plan and target lists (built and tested in pipeline_lib.plan / pipeline_lib.targets), the config
# digest recorded in every provenance sidecar, and wildcard constraints.
import json
import os
import sys

from pipeline_lib.provenance import config_digest
from pipeline_lib.run_info import write_run_info
from pipeline_lib.plan import JOBS, plan_runs
from pipeline_lib.specs import tiny_task_spec
from pipeline_lib.targets import (
    ablation_eval_targets,
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
PLAN = plan_runs(config)
TARGETS = stage_targets(config, PLAN)

# verl runs: each one's Hydra overrides are composed with verl's own config and checked now, so a typo fails
# `snakemake -n` before anything is submitted (cached by content under .snakemake/verl_validated).
if PLAN.of(engine="verl"):
    from pipeline_lib.engines.verl.validate import validate_planned_runs

    print(f"verl overrides validated: {validate_planned_runs(config, plan=PLAN)}", file=sys.stderr)


wildcard_constraints:
    task="[a-z0-9_]+",
    method="[a-z0-9_]+",
    seed="[0-9]+",

# One command for both dataset rules (they differ only in the files countdown adds).
DATA_BUILD_COMMAND = (
    "python -m pipeline_lib.data.build real --dataset {wildcards.dataset} --spec {params.spec:q}"
    " --out-dir {params.out_dir} > {log} 2>&1"
)
