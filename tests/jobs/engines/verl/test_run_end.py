"""A verl run's end under a kill at every point (pipeline_lib/core/run_end.py, verl/runner.py, verl/train.py, prune.py).

The real ``train.run`` on a fake run directory: verl is a fake process that trains steps into the scratch (counting
them), the merger copies the last checkpoint. The end is then killed before and after each filesystem change it
makes, in turn (a ``BaseException``, as a time limit's SIGKILL: nothing catches it); Snakemake removes ``DONE.json``
of the failed job; the retry must train no step and leave the same finished run as an end that was never cut. The
run keeps a probe policy at every step but the last: verl's rotation (2 kept) waits for the job's keeper, and the end
exports each to ``probe/step_<s>/``."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from pipeline_lib.jobs.engines.verl import probe_keep, runner, train
from pipeline_lib.jobs.engines.verl.translate import TrainPaths
from pipeline_lib.plan.settings import group_rl_spec
from tests.jobs.engines.conftest import paper_config

TOTAL, EVERY = 4, 3
PROBES = [1, 2, 3]  # probe_every 1: every step before the last
SHARD = "model_world_size_1_rank_0.pt"


class Killed(BaseException):
    """A kill at a point of the end (a time limit's SIGKILL: no handler runs)."""


class FakeVerl:
    """verl as the engine starts it: resumes from the tracker, trains to the last step, logs and dumps each step."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.trained = run_dir, []

    def __call__(self, command, env, check):
        ckpt = self.run_dir / "checkpoints"
        tracker = ckpt / "latest_checkpointed_iteration.txt"
        start = int(tracker.read_text()) if tracker.is_file() else 0
        with open(env["VERL_FILE_LOGGER_PATH"], "a") as log:
            for step in range(start + 1, TOTAL + 1):
                self.trained.append(step)
                (self.run_dir / "rollout_dump" / f"{step}.jsonl").write_text(
                    json.dumps({"uid": f"u{step}_0_0", "output": "x", "score": 1.0}) + "\n")
                log.write(json.dumps({"step": step, "data": {"critic/score/mean": step / 10}}) + "\n")
                self.rotate(ckpt, step)
                actor = ckpt / f"global_step_{step}" / "actor"
                (actor / "huggingface").mkdir(parents=True)
                (actor / SHARD).write_text(f"weights {step}")
                (actor / "optim_world_size_1_rank_0.pt").write_text("adam")
                (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": 1}))
                (actor / "huggingface" / "config.json").write_text("{}")
                tracker.write_text(str(step))
        return SimpleNamespace(returncode=0)

    def rotate(self, ckpt: Path, step: int) -> None:
        """verl's max_actor_ckpt_to_keep=2 before saving ``step``: older actors go; a probe step's only once the
        job's keeper (polling in its thread) has kept it, as a keeper that keeps up would."""
        for old in range(1, step - 1):
            actor = ckpt / f"global_step_{old}" / "actor"
            if not actor.is_dir():
                continue
            deadline = time.monotonic() + 20
            while old in PROBES and not (self.run_dir / "probe_shards" / f"step_{old}").is_dir():
                assert time.monotonic() < deadline, f"the keeper never kept step {old}"
                time.sleep(0.01)
            shutil.rmtree(actor)


def fake_merge(step_dir: Path, target: Path) -> Path:
    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    (staging / "model.safetensors").write_text((step_dir / SHARD).read_text())
    (staging / "config.json").write_text("{}")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def fake_rollouts(run_dir: Path, spec, tokenizer_dir, data_source, total_steps, **rows) -> Path:
    dumps = sorted(int(p.stem) for p in (run_dir / "rollout_dump").glob("*.jsonl"))
    assert dumps == list(range(1, total_steps + 1)), f"collected from dumps {dumps}: every step's is needed"
    target = run_dir / "rollouts.jsonl"
    train.write_text(target, "".join(json.dumps({"step": s}) + "\n" for s in dumps))
    return target


class Killer:
    """Counts the end's filesystem changes and raises :class:`Killed` before (or right after) the ``at``-th one."""

    def __init__(self, at: int | None, after: bool) -> None:
        self.at, self.after, self.count, self.armed, self.fired = at, after, 0, False, False

    def wrap(self, function):
        def wrapped(*args, **kwargs):
            if not self.armed or self.at is None:
                return function(*args, **kwargs)
            self.count += 1
            if self.count == self.at and not self.after:
                self.fired = True
                raise Killed(f"before {function.__name__}{args[:1]}")
            result = function(*args, **kwargs)
            if self.count == self.at:
                self.fired = True
                raise Killed(f"after {function.__name__}{args[:1]}")
            return result
        return wrapped


@pytest.fixture
def job(tmp_path, monkeypatch):
    """One verl RL run's inputs and the engine with verl, the merger and the rollout collection faked."""
    data = tmp_path / "data"
    data.mkdir()
    pd.DataFrame({"data_source": ["gsm8k"]}).to_parquet(data / "rl_train.parquet")
    pd.DataFrame({"data_source": ["gsm8k"]}).to_parquet(data / "rl_test.parquet")
    (data / "sft" / "final").mkdir(parents=True)
    (data / "sft" / "final" / "config.json").write_text("{}")
    spec = group_rl_spec(paper_config(), "gsm8k", "grpo_exact", "verl")
    spec = replace(spec, rl=replace(spec.rl, steps=TOTAL, checkpoint_every=1, probe_every=1))
    assert spec.rl.probe_steps() == PROBES
    monkeypatch.setattr(probe_keep, "POLL_S", 0.01)
    monkeypatch.setattr(train, "validate_rl", lambda overrides, label: None)
    monkeypatch.setattr(train, "require_installed_project", lambda: None)
    monkeypatch.setattr(train, "merge_actor", fake_merge)
    monkeypatch.setattr(train, "collect_rollouts", fake_rollouts)
    monkeypatch.setattr(train, "_health_source", lambda run_dir: None)

    real_run = runner.subprocess.run

    def attempt(name: str, killer: Killer | None = None) -> FakeVerl:
        run_dir = tmp_path / name / "run"
        verl = FakeVerl(run_dir)

        def fake_run(command, **kwargs):
            if "verl.trainer.main_ppo" not in command:  # git, for the provenance
                return real_run(command, **kwargs)
            result = verl(command, **kwargs)
            if killer is not None:
                killer.armed = True  # verl is done: from here on, the end
            return result

        monkeypatch.setattr(runner.subprocess, "run", fake_run)
        paths = TrainPaths(run_dir, data / "rl_train.parquet", data / "rl_test.parquet", data / "sft" / "final")
        train.run(spec, paths, 0, scratch_dir=tmp_path / name / "scratch", dump_every=EVERY)
        return verl

    return attempt


def _state(root: Path) -> dict[str, str]:
    """Every file under ``root`` (links followed) but provenance sidecars and verl's per-attempt logs, by content."""
    out = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_file() and not name.endswith(".prov.json") and "verl_metrics" not in name \
                and name != "verl_command.json":
            out[name] = path.read_text() if path.suffix != ".json" or path.name != "END.json" else "journal"
    return out


def test_an_end_never_cut_trains_once_and_frees_the_scratch(job, tmp_path):
    verl = job("clean")
    run_dir = tmp_path / "clean" / "run"
    assert verl.trained == list(range(1, TOTAL + 1))
    assert (run_dir / "DONE.json").is_file() and (run_dir / "final" / "model.safetensors").read_text() == "weights 4"
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "checkpoints").is_symlink()
    # each probe step's policy, kept past the rotation and exported; its shards freed with the scratch
    assert [(run_dir / "probe" / f"step_{s}" / "model.safetensors").read_text() for s in PROBES] == \
        [f"weights {s}" for s in PROBES]
    assert not (run_dir / "probe_shards").exists() and not (run_dir / "probe_shards").is_symlink()
    dumps = run_dir / "rollout_dump"
    assert not dumps.is_symlink() and sorted(int(p.stem) for p in dumps.iterdir()) == [3, 4]
    assert not list((tmp_path / "clean" / "scratch").rglob("*"))  # the run's scratch folder is gone
    (run_dir / "DONE.json").unlink()
    again = job("clean")  # Snakemake reruns it (DONE.json deleted, the same run): nothing is trained
    assert again.trained == []


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_a_kill_at_any_point_of_the_end_is_finished_by_the_retry_without_training(job, tmp_path, monkeypatch,
                                                                                     after):
    reference = _state(tmp_path / "reference" / "run") if job("reference") else None
    points = 0
    for at in range(1, 200):
        killer = Killer(at, after)
        with monkeypatch.context() as patch:
            for module, name in ((shutil, "rmtree"), (shutil, "copy2"), (os, "replace"), (Path, "rename"),
                                 (Path, "unlink"), (Path, "symlink_to"), (Path, "mkdir")):
                patch.setattr(module, name, killer.wrap(getattr(module, name)))
            with contextlib.suppress(Killed):
                job(f"cut{at}", killer)
        if not killer.fired:
            break
        points += 1
        run_dir = tmp_path / f"cut{at}" / "run"
        (run_dir / "DONE.json").unlink(missing_ok=True)  # Snakemake removes a failed job's output
        retry = job(f"cut{at}")
        assert retry.trained == [], f"killed at point {at} ({'after' if after else 'before'}): the retry trained"
        assert _state(run_dir) == reference, f"killed at point {at}: the retry left another state"
        assert not (run_dir / "checkpoints").exists() and not list((tmp_path / f"cut{at}" / "scratch").rglob("*"))
        assert not (run_dir / "probe_shards").exists() and not (run_dir / "probe_shards").is_symlink()
    # every change of the end was cut once: the keeper's last sweep, export, journal, probe export, collect, dumps,
    # DONE, prune
    assert points >= 25


def test_a_probe_policy_rotated_out_before_the_keeper_kept_it_is_named_and_nothing_is_published(job, tmp_path,
                                                                                                   monkeypatch):
    """A keeper that never looked while verl ran (rotation at full speed, no poll in time): the sweep after verl
    exits finds only the last two actors (3 and 4), so the steps rotated out are named and no DONE.json is written."""
    monkeypatch.setattr(probe_keep, "POLL_S", 1000.0)
    monkeypatch.setattr(FakeVerl, "rotate", lambda self, ckpt, step: [
        shutil.rmtree(ckpt / f"global_step_{old}" / "actor", ignore_errors=True) for old in range(1, step - 1)])
    with pytest.raises(train.VerlRunError, match=r"probe step\(s\) \[1, 2\] .*were not kept.*train again from scratch"):
        job("lost")
    run_dir = tmp_path / "lost" / "run"
    assert probe_keep.kept(run_dir / "probe_shards") == [3] and not (run_dir / "DONE.json").exists()


def test_a_resume_from_an_earlier_checkpoint_drops_the_kept_policies_of_the_steps_verl_redoes(tmp_path):
    """verl redoes the steps after the checkpoint it resumes from (train.logged_resume_point): their kept policies
    were another policy's and go; the keeper keeps the redone ones when verl saves them again."""
    shards = tmp_path / "run" / "probe_shards"
    for step in (2, 4, 6):
        (shards / f"step_{step}").mkdir(parents=True)
    (shards / "step_8.tmp").mkdir()  # a half-linked folder: never a kept step
    assert probe_keep.kept(shards) == [2, 4, 6]
    assert probe_keep.drop_after(tmp_path / "run", 2) == [4, 6] and probe_keep.kept(shards) == [2]
    assert probe_keep.missing(tmp_path / "run", [2, 4]) == [4]


def test_verl_saves_at_every_probe_step():
    """trainer.save_freq is gcd(checkpoint_every, probe_every): every probe step is a save step."""
    from pipeline_lib.jobs.engines.verl.translate import save_freq

    spec = group_rl_spec(paper_config(), "gsm8k", "grpo_exact", "verl")
    for every, probe, expected in ((64, None, 64), (50, 200, 50), (64, 200, 8), (7, 10, 1)):
        rl = replace(spec.rl, checkpoint_every=every, probe_every=probe)
        assert save_freq(rl) == expected and all(s % save_freq(rl) == 0 for s in rl.probe_steps())
