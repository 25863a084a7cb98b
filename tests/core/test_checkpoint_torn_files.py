"""Resume state a killed writer left half-written (issue 28): a torn or binary last line of ``metrics.jsonl``, a
truncated checkpoint or an unreadable resume JSON is set aside and recomputed, and a killed verl attempt's torn last
metrics line is skipped; none wedges a rerun, which matches the uninterrupted run. The cases are rows of
docs/hostile_cases.md."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline_lib.core.checkpoint import MetricsLog


def _kill_after_step_10(monkeypatch, run_dir):
    from pipeline_lib.jobs.classify import train as train_module
    from tests.conftest import CLASSIFY_PARAMS, classify_spec

    real_save = train_module.save_checkpoint

    def save_then_die(directory, state):
        real_save(directory, state)
        if state["step"] == 10:
            raise KeyboardInterrupt("simulated kill after the step-10 checkpoint")

    monkeypatch.setattr(train_module, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_module.train(classify_spec("softmax", 8), 0, run_dir, progress=False, params=CLASSIFY_PARAMS)
    monkeypatch.setattr(train_module, "save_checkpoint", real_save)


@pytest.mark.parametrize("damage", ["torn_metrics_line", "truncated_checkpoint", "binary_metrics_tail"])
def test_a_rerun_after_a_killed_writer_finishes_and_matches_the_uninterrupted_run(tmp_path, monkeypatch, damage):
    from pipeline_lib.jobs.classify import train as train_module
    from tests.conftest import CLASSIFY_PARAMS, classify_spec, final_parameters

    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    train_module.train(classify_spec("softmax", 8), 0, straight, progress=False, params=CLASSIFY_PARAMS)
    _kill_after_step_10(monkeypatch, interrupted)
    metrics, checkpoint = interrupted / "metrics.jsonl", interrupted / "checkpoint.pt"
    if damage == "torn_metrics_line":  # the writer died mid-line (or the disk filled)
        metrics.write_text(metrics.read_text() + '{"step": 11, "loss": 0.12')
    elif damage == "binary_metrics_tail":
        metrics.write_bytes(metrics.read_bytes() + b'{"step": 11, "loss": "\xe2\x82')
    else:
        checkpoint.write_bytes(checkpoint.read_bytes()[: checkpoint.stat().st_size // 2])
    for _ in range(2):  # the rerun, and a forced rerun of a finished run, both finish
        train_module.train(classify_spec("softmax", 8), 0, interrupted, progress=False, params=CLASSIFY_PARAMS)
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
    from pipeline_lib.core.checkpoint import read_json_state

    state = tmp_path / "round.json"
    assert read_json_state(state) is None
    state.write_text('{"round": 1, "config_sha2')
    assert read_json_state(state) is None and not state.exists()
    assert len(list(tmp_path.glob("round.json.unreadable-*"))) == 1


def test_a_killed_verl_attempts_torn_metrics_line_does_not_wedge_collecting_the_metrics(tmp_path):
    from pipeline_lib.jobs.engines.verl.train import VerlRunError, collect_metrics
    from pipeline_lib.jobs.engines.verl.translate import metrics_log_path

    def record(step):
        return json.dumps({"step": step, "data": {"critic/score/mean": step / 10}})

    killed = tmp_path / "verl_metrics.0.jsonl"  # attempt 0 died writing step 3; attempt 1 resumed at step 3
    killed.write_text(record(1) + "\n" + record(2) + "\n" + record(3)[:20])
    metrics_log_path(tmp_path).write_text(record(3) + "\n" + record(4) + "\n")
    lines = [json.loads(line) for line in collect_metrics(tmp_path, 4).read_text().splitlines()]
    assert [(m["step"], m["critic/score/mean"]) for m in lines] == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)]
    killed.write_text(record(1) + "\n" + record(2)[:20] + "\n" + record(3) + "\n")  # damage mid-file is an error
    with pytest.raises(VerlRunError, match=r"verl_metrics\.0\.jsonl:2: not a verl file-logger record"):
        collect_metrics(tmp_path, 4)
