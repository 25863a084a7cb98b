"""A local training run that diverges stops non-zero naming the step (issue 35, class 5): an RL run whose loss turns
NaN and an SFT run whose weights overflow raise ``DivergedError`` and leave no ``final/`` and no ``DONE.json``. The
cases are rows of docs/hostile_cases.md."""

from __future__ import annotations

import pytest

from tests.conftest import rl_spec, sft_spec


def test_an_rl_run_whose_loss_turns_nan_stops_naming_the_step_and_writes_no_final_model(tiny, tmp_path):
    """tau 1e-300 is 0 in float32: R / tau is NaN, so every weight would be NaN after step 1 (was: DONE.json)."""
    from pipeline_lib.jobs.engines.local import rl as rl_module
    from pipeline_lib.jobs.engines.local.common import DivergedError

    spec = rl_spec(params={"tau": 1e-300}, steps=2)
    with pytest.raises(DivergedError, match=r"step 1 diverged: loss nan"):
        rl_module.train_rl(spec, tiny / "data/rl_train.parquet", tiny / "init", tmp_path, 0, progress=False)
    assert not (tmp_path / "DONE.json").exists() and not (tmp_path / "final").exists()


def test_an_sft_run_whose_weights_overflow_stops_naming_the_step(tiny, tmp_path):
    from pipeline_lib.jobs.engines.local import sft as sft_module
    from pipeline_lib.jobs.engines.local.common import DivergedError

    with pytest.raises(DivergedError, match=r"SFT .*: step \d+ diverged"):
        sft_module.train_sft(sft_spec(lr=1e30, warmup_steps=0), tiny / "data/sft_train.parquet", tiny / "tok",
                             tmp_path, 0, progress=False)
    assert not (tmp_path / "DONE.json").exists() and not (tmp_path / "final").exists()
