"""Shared by the verl engine's tests: placeholder run paths and the paper config with only some baselines."""

from pipeline_lib.jobs.engines.verl.translate import TrainPaths
from tests.jobs.engines.conftest import paper_config

PATHS = TrainPaths("/r/run", "/d/rl_train.parquet", "/d/rl_test.parquet", "/r/sft/final")


def paper_baselines(methods=("opd", "rl_logit")):
    """The paper config with only the given verl baselines planned (their paper task lists, seeds and settings)."""
    config = paper_config()
    config["train"]["baselines"]["methods"] = list(methods)
    return config
