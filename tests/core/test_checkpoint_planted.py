"""Planted and damaged checkpoints (issue 45, item 5): nothing is unpickled (``load_torch_state`` takes tensors,
containers and numbers, RNG states included, and refuses every other object), and a planted pickle or a truncated or
missing ``model.safetensors`` is set aside, never run and never a wedge: the rerun starts clean and ends where an
uninterrupted run does (local SFT, the ImageNet study). The cases are rows of docs/hostile_cases.md."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from tests.conftest import crash_after, params, sft_spec


class _Payload:
    """A pickle that runs code when loaded the old way: ``open(marker, "w")`` creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _killed_sft_run(tiny, run: Path, monkeypatch) -> None:
    from pipeline_lib.jobs.engines.local import sft as sft_module

    crash_after(sft_module, 3, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        sft_module.train_sft(sft_spec(), tiny / "data/sft_train.parquet", tiny / "tok", run, 0, progress=False)
    monkeypatch.undo()
    assert (run / "checkpoint/trainer_state.pt").is_file()


@pytest.mark.parametrize("damage", ["planted_pickle", "truncated_model", "missing_model"])
def test_a_planted_or_damaged_sft_checkpoint_is_set_aside_and_the_rerun_starts_clean(tiny, tmp_path, monkeypatch,
                                                                                     caplog, damage):
    from pipeline_lib.jobs.engines.local import sft as sft_module

    data, tok = tiny / "data/sft_train.parquet", tiny / "tok"
    sft_module.train_sft(sft_spec(), data, tok, tmp_path / "straight", 0, progress=False)
    run, marker = tmp_path / "killed", tmp_path / "payload-ran"
    _killed_sft_run(tiny, run, monkeypatch)
    checkpoint = run / "checkpoint"
    if damage == "planted_pickle":
        torch.save({"step": 3, "config_sha256": "x", "payload": _Payload(marker)}, checkpoint / "trainer_state.pt")
    elif damage == "truncated_model":
        weights = checkpoint / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        (checkpoint / "model.safetensors").unlink()
    caplog.set_level(logging.WARNING)
    for _ in range(2):  # the rerun, and a forced rerun of the finished run, both finish
        sft_module.train_sft(sft_spec(), data, tok, run, 0, progress=False)
    assert not marker.exists(), "the planted pickle ran"
    aside = [p for p in run.iterdir() if p.name.startswith("checkpoint.unreadable-")]
    assert len(aside) == 1, sorted(p.name for p in run.iterdir())
    says = {"planted_pickle": "refused: the checkpoint holds objects that would run code",
            "truncated_model": "model.safetensors is damaged", "missing_model": "model.safetensors missing"}[damage]
    assert says in caplog.text and f"set aside as {aside[0].name}" in caplog.text
    a, b = params(tmp_path / "straight/final"), params(run / "final")  # a clean start reproduces the straight run
    for key in a:
        torch.testing.assert_close(a[key], b[key])


def test_a_planted_imagenet_checkpoint_is_set_aside_never_run(tmp_path, monkeypatch, caplog):
    from pipeline_lib.jobs.classify import train as train_module
    from tests.conftest import CLASSIFY_PARAMS, classify_spec, final_parameters
    from tests.core.test_checkpoint_torn_files import _kill_after_step_10

    straight, run, marker = tmp_path / "straight", tmp_path / "run", tmp_path / "payload-ran"
    train_module.train(classify_spec("softmax", 8), 0, straight, progress=False, params=CLASSIFY_PARAMS)
    _kill_after_step_10(monkeypatch, run)
    torch.save({"step": 10, "payload": _Payload(marker)}, run / "checkpoint.pt")
    caplog.set_level(logging.WARNING)
    train_module.train(classify_spec("softmax", 8), 0, run, progress=False, params=CLASSIFY_PARAMS)
    assert not marker.exists(), "the planted pickle ran"
    (aside,) = run.glob("checkpoint.pt.unreadable-*")
    assert "refused: the checkpoint holds objects that would run code" in caplog.text and aside.name in caplog.text
    for key, value in final_parameters(straight).items():
        torch.testing.assert_close(value, final_parameters(run)[key])


def test_the_checkpoint_loader_refuses_every_pickled_object_but_reads_rng_state(tmp_path):
    import random

    import numpy as np

    from pipeline_lib.core.checkpoint import load_torch_state, rng_state, set_rng_state

    good = tmp_path / "good.pt"
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    torch.save({"rng": rng_state(), "step": 1}, good)
    expected = (torch.rand(2), np.random.rand(2), random.random())
    set_rng_state(load_torch_state(good)["rng"])
    got = (torch.rand(2), np.random.rand(2), random.random())
    assert torch.equal(expected[0], got[0]) and np.array_equal(expected[1], got[1]) and expected[2] == got[2]
    bad = tmp_path / "bad.pt"
    torch.save({"rng": np.random.get_state()}, bad)  # a numpy object: refused like any other global
    assert load_torch_state(bad) is None and not bad.exists()
