"""Pruning a finished verl run's scratch (pipeline_lib/jobs/engines/verl/prune.py) on fake run directories."""

from __future__ import annotations

from pathlib import Path

from pipeline_lib.jobs.engines.verl.prune import prune


def _run_dir(root: Path, finished: bool) -> Path:
    run = root / "run"
    for step in (100, 200):
        (run / "checkpoints" / f"global_step_{step}" / "actor").mkdir(parents=True)
        (run / "checkpoints" / f"global_step_{step}" / "actor" / "model.pt").write_bytes(b"x" * 10)
    (run / "rollout_dump").mkdir()
    for step in range(1, 24):
        (run / "rollout_dump" / f"{step}.jsonl").write_text("{}\n")
    if finished:
        (run / "final").mkdir()
        (run / "DONE.json").write_text("{}")
    return run


def test_unfinished_run_keeps_everything(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, finished=False)
    assert prune(run, 10) == []
    assert (run / "checkpoints" / "global_step_200").is_dir() and len(list((run / "rollout_dump").iterdir())) == 23


def test_finished_run_drops_checkpoints_and_thins_dumps(tmp_path: Path) -> None:
    run = _run_dir(tmp_path, finished=True)
    removed = prune(run, 10)
    assert not (run / "checkpoints").exists()
    assert sorted(int(p.stem) for p in (run / "rollout_dump").iterdir()) == [10, 20, 23]
    assert len(removed) == 1 + 20
