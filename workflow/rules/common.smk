# Shared wiring: target lists (built and tested in pipeline_lib.targets), the config
# digest recorded in every provenance sidecar, and wildcard constraints.
import json
import os

from pipeline_lib.provenance import config_digest
from pipeline_lib.targets import imagenet_run_spec, imagenet_runs, stage_targets

CONFIG_SHA256 = config_digest(config)
TARGETS = stage_targets(config)


wildcard_constraints:
    task="[a-z0-9_]+",
    method="[a-z0-9_]+",
    seed="[0-9]+",
