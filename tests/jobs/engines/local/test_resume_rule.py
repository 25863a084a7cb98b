"""One resume rule for every engine (issue 35, class 1): a run directory is resumed only by the run whose config, code
and input contents wrote its state; any other run sets that state aside (``stale/<digest>/``, named in the log) and
starts clean."""

import json
import logging
import shutil
from dataclasses import replace

import pytest
import torch

from pipeline_lib.core.checkpoint import RUN_IDENTITY, STALE_DIR, claim_run_dir, run_identity
from pipeline_lib.core.data.build import build_tiny
from pipeline_lib.jobs.engines.local import rl as rl_module
from pipeline_lib.jobs.engines.local import sft as sft_module
from tests.conftest import ENGINE_TINY, SFT, baseline_settings, crash_after, params, rl_spec, sft_spec


def _same_weights(a, b) -> None:
    a, b = params(a), params(b)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


def test_a_killed_sft_run_whose_data_was_replaced_at_the_same_path_starts_clean(tiny, tmp_path, monkeypatch, caplog):
    """The reported case: SFT killed after a checkpoint, its parquet replaced in place (``data_tiny`` rerun with
    another result); the rerun resumed from the checkpoint on the old data. Now it sets the state aside and trains
    on the new data from step 0: its weights equal a clean run's on the new data."""
    data = tmp_path / "data/sft_train.parquet"
    data.parent.mkdir()
    shutil.copy(tiny / "data/sft_train.parquet", data)
    run = tmp_path / "run"
    crash_after(sft_module, 3, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        sft_module.train_sft(sft_spec(), data, tiny / "tok", run, 0, progress=False)
    monkeypatch.undo()
    assert (run / "checkpoint").is_dir()
    old_run = json.loads((run / RUN_IDENTITY).read_text())["run_sha256"]

    build_tiny("countdown_tiny", ENGINE_TINY, 1, None, tmp_path / "other")  # another draw of the same task
    shutil.copy(tmp_path / "other/sft_train.parquet", data)
    with caplog.at_level(logging.WARNING, logger="pipeline_lib.core.checkpoint"):
        sft_module.train_sft(sft_spec(), data, tiny / "tok", run, 0, progress=False)
    sft_module.train_sft(sft_spec(), tmp_path / "other/sft_train.parquet", tiny / "tok", tmp_path / "clean", 0,
                         progress=False)
    _same_weights(run / "final", tmp_path / "clean/final")
    assert (run / STALE_DIR / old_run / "checkpoint").is_dir()  # kept, not deleted
    warning = caplog.text
    assert "set aside" in warning and str(run / STALE_DIR / old_run) in warning
    assert f"input {data}" in warning
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, SFT["steps"] + 1))


def test_a_killed_rl_run_with_another_config_starts_clean_instead_of_resuming(tiny, tmp_path, monkeypatch, caplog):
    data, init = tiny / "data/rl_train.parquet", tiny / "init"
    crash_after(rl_module, 2, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        rl_module.train_rl(rl_spec(), data, init, tmp_path / "run", 0, progress=False)
    monkeypatch.undo()
    with caplog.at_level(logging.WARNING, logger="pipeline_lib.core.checkpoint"):
        rl_module.train_rl(rl_spec(lr=5e-4), data, init, tmp_path / "run", 0, progress=False)
    assert "changed: config" in caplog.text
    rl_module.train_rl(rl_spec(lr=5e-4), data, init, tmp_path / "clean", 0, progress=False)
    _same_weights(tmp_path / "run/final", tmp_path / "clean/final")
    assert (tmp_path / "run/rollouts.jsonl").read_text() == (tmp_path / "clean/rollouts.jsonl").read_text()


def _identity(tmp_path, **change):
    source = tmp_path / "input.bin"
    if not source.exists():
        source.write_bytes(b"old")
    identity = run_identity({"lr": 1e-3}, [source], entry="pipeline_lib.core.checkpoint")
    return identity | change


def test_the_rule_keys_config_code_and_every_input_content(tmp_path, caplog):
    run = tmp_path / "run"
    first = _identity(tmp_path)
    assert claim_run_dir(run, first, "local") == []
    (run / "checkpoint").mkdir()
    assert claim_run_dir(run, first, "local") == []  # the same run: resumed
    (tmp_path / "input.bin").write_bytes(b"new")  # the same path, other content
    changed = _identity(tmp_path)
    assert changed["inputs"] != first["inputs"] and changed["config_sha256"] == first["config_sha256"]
    with caplog.at_level(logging.WARNING, logger="pipeline_lib.core.checkpoint"):
        moved = claim_run_dir(run, changed, "local")
    assert [p.name for p in moved] == ["checkpoint"] and not (run / "checkpoint").exists()
    assert f"input {tmp_path / 'input.bin'}" in caplog.text
    (run / "checkpoint").mkdir()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pipeline_lib.core.checkpoint"):
        assert claim_run_dir(run, changed | {"code_sha256": "edited"}, "local")  # another code digest
    assert "changed: code" in caplog.text
    assert len(list((run / STALE_DIR).iterdir())) == 2


def test_state_without_a_recorded_run_is_set_aside_and_a_finished_run_moves_nothing(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)  # written before run.json existed
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    moved = claim_run_dir(run, _identity(tmp_path), "local")
    assert sorted(p.name for p in moved) == ["checkpoint", "metrics.jsonl"]
    assert moved[0].parent.name == "unrecorded"
    (run / "final").mkdir()  # a finished run keeps no resume state: nothing to mix, nothing moved
    assert claim_run_dir(run, _identity(tmp_path, config_sha256="other"), "local") == []
    assert (run / "final").is_dir()


def test_rationalization_annotates_again_when_its_data_changed_at_the_same_path(tiny, tmp_path):
    """The annotation the rationalization baseline reuses on resume was keyed by paths too."""
    import pandas as pd

    from pipeline_lib.jobs.engines.local.rationalization import train_rationalization

    spec = replace(sft_spec(steps=1), method="rationalization", baseline=baseline_settings(
        "rationalization", hint="The answer is {answer}.", max_new_tokens=4, temperature=1.0, batch_size=16))
    data = tmp_path / "sft_train.parquet"
    shutil.copy(tiny / "data/sft_train.parquet", data)
    train_rationalization(spec, data, tiny / "init", tiny / "tok", tmp_path / "run", 0, progress=False)
    build_tiny("countdown_tiny", ENGINE_TINY, 1, None, tmp_path / "other")
    shutil.copy(tmp_path / "other/sft_train.parquet", data)
    (tmp_path / "run/DONE.json").unlink()  # Snakemake's rerun after its input changed
    train_rationalization(spec, data, tiny / "init", tiny / "tok", tmp_path / "run", 0, progress=False)
    questions = [m[0]["content"] for m in pd.read_parquet(tmp_path / "run/rationalized_sft.parquet")["messages"]]
    assert questions == [m[0]["content"] for m in pd.read_parquet(data)["messages"]]


def test_an_engine_that_resumes_from_its_whole_directory_sets_all_of_it_aside(tmp_path):
    """``state=None`` (how verl's run directory would adopt the rule: verl resumes from whatever it holds)."""
    run = tmp_path / "run"
    claim_run_dir(run, _identity(tmp_path), "verl", state=None)
    for name in ("checkpoints", "final", "DONE.json", "verl_metrics.jsonl"):
        (run / name).mkdir() if "." not in name else (run / name).write_text("{}")
    assert claim_run_dir(run, _identity(tmp_path), "verl", state=None) == []
    moved = claim_run_dir(run, _identity(tmp_path, code_sha256="edited"), "verl", state=None)
    assert sorted(p.name for p in moved) == ["DONE.json", "checkpoints", "final", "verl_metrics.jsonl"]
    assert sorted(p.name for p in run.iterdir()) == [RUN_IDENTITY, STALE_DIR]
