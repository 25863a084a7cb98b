# Shared wiring: target lists (built and tested in pipeline_lib.targets), the config
# digest recorded in every provenance sidecar, and wildcard constraints.
import json
import os
import sys

from pipeline_lib.provenance import code_digest, config_digest
from pipeline_lib.run_info import write_run_info
from pipeline_lib.targets import (
    ablation_method,
    ablation_run_spec,
    ablation_runs,
    ablation_tau,
    base_init,
    baseline_runs,
    baseline_spec,
    baseline_train_data,
    opd_teacher,
    opd_teacher_spec,
    scale_config,
    scale_eval_targets,
    scale_runs,
    verl_ablation_spec,
    verl_tasks,
    eval_targets,
    imagenet_run_spec,
    imagenet_runs,
    rl_run_spec,
    rl_runs,
    rl_train_data,
    sft_run_spec,
    stage_targets,
    table1_eval_targets,
    local_task_pattern,
    tiny_task_spec,
)
from pipeline_lib.engines.verl.translate import rl_spec as verl_rl_spec, sft_spec as verl_sft_spec
from pipeline_lib.engines.verl.translate import VERL_BASELINES, baseline_rl_spec as verl_baseline_spec
from pipeline_lib.engines.verl.translate import slurm_resources as verl_slurm_resources

CONFIG_SHA256 = config_digest(config)
# Every job's shell (local or on a Slurm node) exports the digest; provenance sidecars record it.
shell.prefix(f"export PIPELINE_CONFIG_SHA256={CONFIG_SHA256}; ")


report: "../report/workflow.rst"


onstart:
    write_run_info(config)

TARGETS = stage_targets(config)

# The verl engine: every planned run's Hydra overrides are composed with verl's own config and checked now, so a
# typo fails `snakemake -n` before anything is submitted (each passed run is cached under .snakemake/).
if config["train"]["engine"] == "verl":
    from pipeline_lib.engines.verl.validate import validate_planned_runs

    VERL_VALIDATION = validate_planned_runs(config)
    print(f"verl overrides validated: {VERL_VALIDATION}", file=sys.stderr)


wildcard_constraints:
    task="[a-z0-9_]+",
    method="[a-z0-9_]+",
    seed="[0-9]+",

# One command for both dataset rules (they differ only in the files countdown adds).
DATA_BUILD_COMMAND = (
    "python -m pipeline_lib.data.build real --dataset {wildcards.dataset} --spec {params.spec:q}"
    " --out-dir {params.out_dir} > {log} 2>&1"
)
