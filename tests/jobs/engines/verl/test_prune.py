"""Pruning a finished verl run's scratch (pipeline_lib/jobs/engines/verl/prune.py) on fake run directories."""

from __future__ import annotations

from pathlib import Path

from pipeline_lib.core.checkpoint import claim_run_dir
from pipeline_lib.jobs.engines.verl.prune import place_scratch, prune


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


def test_train_job_prunes_with_this_function(tmp_path: Path) -> None:
    """The function the verl train job calls after DONE.json: prunes a finished run, leaves an unfinished one."""
    from pipeline_lib.jobs.engines.verl import runner

    done, running = _run_dir(tmp_path / "a", finished=True), _run_dir(tmp_path / "b", finished=False)
    assert runner.prune is prune
    assert len(runner.prune(done, 10)) == 21 and not (done / "checkpoints").exists()
    assert runner.prune(running, 10) == [] and (running / "checkpoints" / "global_step_200" / "actor").is_dir()


def _claimed(run: Path, name: str = "a") -> Path:
    claim_run_dir(run, {"config_sha256": name, "code_sha256": "c", "inputs": {}}, "verl", state=None)
    return run


def test_scratch_links_resume_and_prune(tmp_path: Path) -> None:
    run, scratch = _claimed(tmp_path / "results/train/t/m/seed0"), tmp_path / "scratch/t/m/seed0"
    placed = place_scratch(run, scratch)
    ckpt, dumps = run / "checkpoints", run / "rollout_dump"
    assert ckpt.is_symlink() and dumps.is_symlink()
    assert placed["checkpoints"].parent.parent == scratch.resolve() and ckpt.resolve() == placed["checkpoints"]
    (ckpt / "global_step_5").mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("5")
    for step in range(1, 13):
        (dumps / f"{step}.jsonl").write_text("{}\n")
    assert place_scratch(run, scratch) == placed  # a resubmission: the same links, the checkpoint still there
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "5"
    assert prune(run, 5) == []  # not finished: nothing goes
    (run / "final").mkdir()
    (run / "DONE.json").write_text("{}")
    prune(run, 5)
    assert not ckpt.exists() and not ckpt.is_symlink() and not placed["checkpoints"].exists()
    assert not dumps.is_symlink() and sorted(int(p.stem) for p in dumps.iterdir()) == [5, 10, 12]
    assert not placed["rollout_dump"].exists() and not placed["checkpoints"].parent.exists()


def test_scratch_keeps_real_dirs_and_inside_paths(tmp_path: Path) -> None:
    run = _claimed(tmp_path / "run")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("3")
    placed = place_scratch(run, tmp_path / "scratch")
    assert not (run / "checkpoints").is_symlink() and placed["checkpoints"] == (run / "checkpoints").resolve()
    assert (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "3"
    assert (run / "rollout_dump").is_symlink()  # the one not there yet goes to the scratch
    inside = _claimed(tmp_path / "other")
    place_scratch(inside, inside / "scratch")
    assert not (inside / "checkpoints").exists() and not (inside / "rollout_dump").exists()


def test_another_run_gets_its_own_scratch(tmp_path: Path) -> None:
    """A run directory claimed by a changed run: the old run's scratch folder is set aside beside itself on the
    scratch (same filesystem) with its content intact, stale/ holding a link to it, and the new run's link points to
    a fresh folder (verl must not resume the other run's checkpoint)."""
    run, scratch = _claimed(tmp_path / "run", "a"), tmp_path / "scratch"
    old = place_scratch(run, scratch)["checkpoints"]
    (old / "latest_checkpointed_iteration.txt").write_text("7")
    _claimed(run, "b")
    new = place_scratch(run, scratch)["checkpoints"]
    aside = next((run / "stale").iterdir()) / "checkpoints"
    assert new != old and not any(new.iterdir()) and (run / "checkpoints").resolve() == new
    assert aside.is_symlink() and aside.resolve().parent == old.parent and aside.resolve() != new
    assert (aside / "latest_checkpointed_iteration.txt").read_text() == "7"
