"""The local engine's end under a kill while the finished run's checkpoint is freed (pipeline_lib/core/run_end.py):
the retry (DONE.json removed by Snakemake) trains no step and publishes the same model."""

from __future__ import annotations

import shutil

import pytest
import torch

from pipeline_lib.core import checkpoint as checkpoint_module
from pipeline_lib.jobs.engines.local import rl as rl_module
from pipeline_lib.jobs.engines.local import sft as sft_module
from tests.conftest import params, rl_spec, sft_spec


class Killed(BaseException):
    """A time limit's SIGKILL: no handler runs."""


def _kill_while_freeing(monkeypatch) -> None:
    """write_done's freeing of the checkpoint is cut half-way: one file deleted, then the job is killed."""
    def half_discard(run_dir):
        first = next(p for p in sorted((run_dir / "checkpoint").rglob("*")) if p.is_file())
        first.unlink()
        raise Killed(f"killed while deleting {run_dir / 'checkpoint'}")

    monkeypatch.setattr(checkpoint_module, "discard_resume_state", half_discard)


def _no_training(monkeypatch, module) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the retry trained")

    monkeypatch.setattr(module, "load_model", refuse)  # every training path loads its model first


def test_rl_killed_while_its_checkpoint_is_freed_is_finished_without_training(tiny, tmp_path, monkeypatch):
    data, init, run = tiny / "data/rl_train.parquet", tiny / "init", tmp_path / "run"
    with monkeypatch.context() as patch:
        _kill_while_freeing(patch)
        with pytest.raises(Killed):
            rl_module.train_rl(rl_spec(steps=2), data, init, run, 0, progress=False)
    trained = params(run / "final")
    (run / "DONE.json").unlink()  # Snakemake removes a failed job's output
    assert (run / "checkpoint").exists()  # half freed: what a resume would have read
    with monkeypatch.context() as patch:
        _no_training(patch, rl_module)
        rl_module.train_rl(rl_spec(steps=2), data, init, run, 0, progress=False)
    assert (run / "DONE.json").is_file() and not (run / "checkpoint").exists()
    for key, value in params(run / "final").items():
        torch.testing.assert_close(value, trained[key])
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2


def test_sft_with_a_damaged_final_trains_again(tiny, tmp_path, monkeypatch):
    """The journal only counts a final/ whose files are as exported: a changed file means training again."""
    data, tok, run = tiny / "data/sft_train.parquet", tiny / "tok", tmp_path / "run"
    with monkeypatch.context() as patch:
        _kill_while_freeing(patch)
        with pytest.raises(Killed):
            sft_module.train_sft(sft_spec(), data, tok, run, 0, progress=False)
    (run / "DONE.json").unlink()
    weights = run / "final" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    shutil.rmtree(run / "checkpoint")
    sft_module.train_sft(sft_spec(), data, tok, run, 0, progress=False)  # trains from scratch, as it must
    assert (run / "DONE.json").is_file()
    with monkeypatch.context() as patch:  # and now its final/ is recorded: a rerun trains nothing
        (run / "DONE.json").unlink()
        _no_training(patch, sft_module)
        sft_module.train_sft(sft_spec(), data, tok, run, 0, progress=False)
