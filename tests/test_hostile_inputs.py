"""Hostile and careless inputs, round two (issue 28): state files a killed writer left half-written, config
mistakes that used to pass parse time, data rows of every kind of bad, and sidecars or configs that are not what
they claim. Each gets a sentence naming the file, row or key, or is set aside and recomputed; none crashes every
rerun. The table of these cases is docs/hostile_cases.md."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline_lib.checkpoint import MetricsLog

# --- resume state: a torn or corrupt file is set aside, never a wedge -------------------------------------------

def _kill_after_step_10(monkeypatch, run_dir):
    from pipeline_lib.classify import train as train_module

    from .test_classify import SPEC

    real_save = train_module.save_checkpoint

    def save_then_die(directory, state):
        real_save(directory, state)
        if state["step"] == 10:
            raise KeyboardInterrupt("simulated kill after the step-10 checkpoint")

    monkeypatch.setattr(train_module, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_module.train(SPEC, "softmax", 8, 0, run_dir, progress=False)
    monkeypatch.setattr(train_module, "save_checkpoint", real_save)


@pytest.mark.parametrize("damage", ["torn_metrics_line", "truncated_checkpoint", "binary_metrics_tail"])
def test_a_rerun_after_a_killed_writer_finishes_and_matches_the_uninterrupted_run(tmp_path, monkeypatch, damage):
    from pipeline_lib.classify import train as train_module

    from .test_classify import SPEC, final_parameters

    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    train_module.train(SPEC, "softmax", 8, 0, straight, progress=False)
    _kill_after_step_10(monkeypatch, interrupted)
    metrics, checkpoint = interrupted / "metrics.jsonl", interrupted / "checkpoint.pt"
    if damage == "torn_metrics_line":  # the writer died mid-line (or the disk filled)
        metrics.write_text(metrics.read_text() + '{"step": 11, "loss": 0.12')
    elif damage == "binary_metrics_tail":
        metrics.write_bytes(metrics.read_bytes() + b'{"step": 11, "loss": "\xe2\x82')
    else:
        checkpoint.write_bytes(checkpoint.read_bytes()[: checkpoint.stat().st_size // 2])
    for _ in range(2):  # the rerun, and a forced rerun of a finished run, both finish
        train_module.train(SPEC, "softmax", 8, 0, interrupted, progress=False)
    for key, value in final_parameters(straight).items():
        torch.testing.assert_close(value, final_parameters(interrupted)[key])
    assert (straight / "metrics.jsonl").read_text() == metrics.read_text()
    aside = sorted(p.name for p in interrupted.iterdir() if ".unreadable-" in p.name)
    assert len(aside) == 1 and aside[0].startswith(metrics.name if "metrics" in damage else checkpoint.name), aside


def test_metrics_log_keeps_the_lines_before_the_first_unreadable_one(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    good = [json.dumps({"step": s, "loss": 1.0 / s}) for s in (1, 2, 3)]
    path.write_text("\n".join([*good, '{"step": 4, "lo', json.dumps({"step": 5})]) + "\n")
    with caplog.at_level("WARNING"):
        log = MetricsLog(path, resume_step=10)
        log.write({"step": 4, "loss": 0.25})
        log.close()
    assert path.read_text().splitlines() == [*good, json.dumps({"step": 4, "loss": 0.25})]
    assert f"{path}: line 4 is unreadable" in caplog.text and ".unreadable-" in caplog.text
    (aside,) = tmp_path.glob("metrics.jsonl.unreadable-*")
    assert '{"step": 4, "lo' in aside.read_text()  # the damaged original is kept for inspection


def test_unreadable_round_state_json_is_set_aside_and_recomputed(tmp_path):
    from pipeline_lib.checkpoint import read_json_state

    state = tmp_path / "round.json"
    assert read_json_state(state) is None
    state.write_text('{"round": 1, "config_sha2')
    assert read_json_state(state) is None and not state.exists()
    assert len(list(tmp_path.glob("round.json.unreadable-*"))) == 1
