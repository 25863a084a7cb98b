# Shared wiring: target lists (built and tested in pipeline_lib.targets), the config
# digest recorded in every provenance sidecar, and wildcard constraints.
import json
import os

from pipeline_lib.provenance import config_digest
from pipeline_lib.run_info import write_run_info
from pipeline_lib.targets import (
    eval_targets,
    imagenet_run_spec,
    imagenet_runs,
    rl_run_spec,
    rl_runs,
    rl_train_data,
    sft_run_spec,
    stage_targets,
    tiny_task_spec,
)

CONFIG_SHA256 = config_digest(config)
# Every job's shell (local or on a Slurm node) exports the digest; provenance sidecars record it.
shell.prefix(f"export PIPELINE_CONFIG_SHA256={CONFIG_SHA256}; ")


report: "../report/workflow.rst"


onstart:
    write_run_info(config)

TARGETS = stage_targets(config)


wildcard_constraints:
    task="[a-z0-9_]+",
    method="[a-z0-9_]+",
    seed="[0-9]+",

# One command for both dataset rules (they differ only in the files countdown adds).
DATA_BUILD_COMMAND = (
    "python -m pipeline_lib.data.build real --dataset {wildcards.dataset} --spec {params.spec:q}"
    " --out-dir {params.out_dir} > {log} 2>&1"
)
