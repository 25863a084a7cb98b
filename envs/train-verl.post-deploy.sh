#!/usr/bin/env bash
# Snakemake (`--sdm conda`) runs this inside the new train-verl env after creating it, from the workflow's working
# directory: the repository root, where every rule runs `python -m pipeline_lib...`. It installs the project there,
# editable, for its `verl.plugins` entry point, which registers the advantage estimators in every Ray worker on
# every node. (An editable path in the env file would be resolved from the copy Snakemake makes in .snakemake/conda.)
# The env file pins the dependencies, so pip adds none here.
set -euo pipefail
if ! grep -q '^name = "pipeline_lib"' pyproject.toml 2>/dev/null; then
    echo "train-verl post-deploy: $PWD is not the repository root (no pipeline_lib pyproject.toml); run snakemake" \
         "from the repository root" >&2
    exit 1
fi
python -m pip install --no-deps -e "$PWD"
