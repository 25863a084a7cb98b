"""One process running several entry points gives the same outputs as separate commands."""

import hashlib
import json

import pytest

from pipeline_lib.engines.local.batch import main, run_steps

SPEC = {"n_train": 20, "n_val": 5, "n_test": 5, "imperfect_fraction": 0.3, "numbers_per_task": [3], "max_number": 9,
        "max_target": 100}


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.parquet"))}


def _build(task, out):
    return {"module": "pipeline_lib.data.build",
            "args": ["tiny", "--task", task, "--spec", json.dumps(SPEC), "--seed", "0", "--out-dir", str(out)]}


def test_batched_steps_match_separate_runs(tmp_path):
    from pipeline_lib.data.build import main as build_main

    for task in ("countdown_tiny", "arith_tiny"):
        step = _build(task, tmp_path / "alone" / task)
        assert build_main(step["args"]) == 0
    seconds = run_steps([_build(t, tmp_path / "batch" / t) for t in ("countdown_tiny", "arith_tiny")])
    assert len(seconds) == 2
    for task in ("countdown_tiny", "arith_tiny"):
        alone, batched = _digest(tmp_path / "alone" / task), _digest(tmp_path / "batch" / task)
        assert set(alone) == {"rl_train.parquet", "rl_val.parquet", "rl_test.parquet", "sft_train.parquet"}
        assert alone == batched


def test_batch_rejects_other_modules_and_bad_steps():
    with pytest.raises(ValueError, match="not a batchable entry point"):
        run_steps([{"module": "os", "args": []}])
    with pytest.raises(ValueError, match="args must be a list of strings"):
        run_steps([{"module": "pipeline_lib.data.build", "args": [1]}])
    with pytest.raises(ValueError, match="non-empty"):
        main(["--steps", "[]"])
