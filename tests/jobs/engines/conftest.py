"""Shared by the engines' tests: the paper config as Snakemake reads it."""

import yaml

from pipeline_lib.core.config import validate_config
from tests.conftest import REPO

SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def paper_config() -> dict:
    """config/paper.yaml on its own with the schema defaults, as `snakemake --configfile config/paper.yaml` reads it."""
    return validate_config(yaml.safe_load((REPO / "config/paper.yaml").read_text()), SCHEMA)
