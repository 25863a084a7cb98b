"""A verl job cut by its Slurm time limit resumes from its checkpoint when the profile's retry resubmits it.

The end-to-end test runs a verl preflight job (GRPO, verl's own trainer behind the launcher) through the Snakemake
Slurm executor on the local CI cluster (.ci/slurm/local_cluster.py, shared with tests/workflow/test_slurm.py), lets
Slurm's time limit cut it after a checkpoint, and checks that the retry, with the runtime the profile gives a second
attempt, finishes the run from that checkpoint with every step's metrics and rollouts once. The unit tests below it pin
the resume rules of :mod:`pipeline_lib.jobs.engines.verl.train` that a cut at the wrong moment needs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipeline_lib.jobs.engines.verl.translate import TrainPaths, checkpoint_dir, metrics_log_path, rollout_dump_dir
from pipeline_lib.plan.estimates import site_defaults
from tests.conftest import REPO
from tests.slurm_helpers import PROFILE, ray_phase, shared_cluster, snakemake_env, submitted_job_ids

# enough that the steps run between the cut's request and Slurm's next limit check (up to about 30 s, then KillWait
# 5 s) never finish the run: a step with its checkpoint takes 3-4 s here since vLLM's threads are no longer
# pinned to one core, 7-10 s before
STEPS = 20
#: attempt n gets RUNTIME x n minutes, the profile's rule ("60 * attempt" in profiles/slurm); the test cuts attempt 1
RUNTIME = 15


@pytest.fixture(scope="module")
def slurm_cluster():
    with shared_cluster():
        yield


def _job(job_id: str) -> dict[str, str]:
    shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    return dict(item.split("=", 1) for item in shown.stdout.split() if "=" in item)


def _processes_of_job(job_id: str) -> list[str]:
    """Command lines of the live processes started inside Slurm job ``job_id`` (its id is in their environment)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if f"SLURM_JOB_ID={job_id}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200])
        except OSError:
            continue
    return found


def _records(path: Path) -> dict[int, dict]:
    """A verl file-logger file by step (a step logged twice in one attempt would be a failure of its own)."""
    by_step: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the cut attempt's torn last line
        step = record["step"]
        assert step not in by_step or not any(not k.startswith("val-") for k in record["data"]), \
            f"{path}: step {step} logged twice in one attempt"
        by_step.setdefault(step, {}).update(record["data"])
    return by_step


def _trained(records: dict[int, dict]) -> list[int]:
    return sorted(step for step, data in records.items() if "training/global_step" in data)


def _scratch_profile(directory: Path) -> Path:
    """The CI cluster's profile with profiles/slurm's retries and preflight_train's resources, runtime scaled down
    (attempt n: RUNTIME x n minutes) and memory within a CI node."""
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    slurm = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert slurm["retries"] >= 1 and "attempt" in str(slurm["set-resources"]["preflight_train"]["runtime"])
    resources = {**slurm["set-resources"]["preflight_train"], "runtime": f"{RUNTIME} * attempt", "mem_mb": 3000}
    profile.update({"retries": slurm["retries"], "set-resources": {"preflight_train": resources}})
    directory.mkdir()
    (directory / "config.yaml").write_text(yaml.safe_dump(profile))
    return directory


def test_a_verl_job_cut_by_its_time_limit_resumes_from_its_checkpoint(slurm_cluster, workflow_copy, tmp_path):
    """Attempt 1 of the GRPO preflight job runs under Slurm until verl has written a checkpoint; then its time limit
    is lowered below its run time, so Slurm's limit check cuts it (TIMEOUT). A fixed one-minute limit cannot be
    placed between the first checkpoint and the end here: verl's start-up alone took 1 to 3.5 min on this loaded
    2-core host. The profile's `retries` resubmits the job with twice the runtime, and attempt 2 must resume from
    the checkpoint: its verl starts after it, every step 1..STEPS is in metrics.jsonl and rollouts.jsonl once (the
    steps attempt 1 finished before the checkpoint from attempt 1, the rest from attempt 2), and DONE.json was
    written inside attempt 2's Slurm job."""
    started = time.monotonic()
    config = yaml.safe_load((workflow_copy / "config/preflight.yaml").read_text())
    section = config["preflight"]
    section["kinds"] = ["sft", "grpo"]
    rl = section["row"]["rl"]
    # probe_every 5: three policies kept (steps 5, 10, 15) across the cut, not one per step (19 merges at the end)
    section["row"]["rl"] = {**rl, "steps": STEPS, "checkpoint_every": 1, "probe_every": 5,
                            "verl": {**rl["verl"], "test_freq": 4}}
    (workflow_copy / "resume.yaml").write_text(yaml.safe_dump(config))
    env = snakemake_env()
    # what the GRPO job starts from (data, tokenizer, the tiny model, or the SFT run where the paper config's
    # train.rl_start is sft), made locally: only the job under test goes through Slurm
    upstream = subprocess.run([sys.executable, "-m", "snakemake", "results/preflight/grpo/DONE.json", "--omit-from",
                               "preflight_train", "--cores", "2", "--configfile", "resume.yaml"], cwd=workflow_copy,
                              env=env, capture_output=True, text=True, timeout=900)
    assert upstream.returncode == 0, upstream.stderr[-5000:]
    upstream_s = time.monotonic() - started

    profile = _scratch_profile(tmp_path / "profile")
    out = workflow_copy / "snakemake.out"
    run_dir = workflow_copy / "results/preflight/grpo"
    tracker = checkpoint_dir(run_dir) / "latest_checkpointed_iteration.txt"
    # one Ray phase at a time on the CI host: the 2-node probe of tests/workflow/test_slurm.py starts Ray too (RAY_LOCK)
    with ray_phase():
        with open(out, "w") as handle:
            snakemake = subprocess.Popen([sys.executable, "-m", "snakemake", "results/preflight/grpo/DONE.json",
                                          "--profile", str(profile), "--configfile", "resume.yaml"], cwd=workflow_copy,
                                         env=env, stdout=handle, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 1200  # verl's start-up under Slurm on a loaded 2-core host: up to 7 min
            # checkpoint 2: even a cut landing before step 2 is logged leaves checkpoint 1 to resume from
            while not (tracker.is_file() and tracker.read_text().strip().isdigit() and int(tracker.read_text()) >= 2):
                assert snakemake.poll() is None, f"Snakemake ended before a checkpoint:\n{out.read_text()[-5000:]}"
                assert time.monotonic() < deadline, f"no verl checkpoint 2 in 1200 s:\n{out.read_text()[-5000:]}"
                time.sleep(1)
            first = submitted_job_ids(out.read_text())
            assert len(first) == 1, out.read_text()
            checkpointed = int(tracker.read_text())
            assert 2 <= checkpointed < STEPS, checkpointed
            limit_before = _job(first[0])["TimeLimit"]
            cut = subprocess.run(["scontrol", "update", f"JobId={first[0]}", "TimeLimit=1"], capture_output=True,
                                 text=True, timeout=60)
            assert cut.returncode == 0, cut.stderr
            returncode = snakemake.wait(1500)
        finally:
            if snakemake.poll() is None:
                snakemake.terminate()
                snakemake.wait(60)
    output = out.read_text()
    assert returncode == 0, output[-6000:]
    check_resumed_run(workflow_copy, output, checkpointed, limit_before,
                      f"upstream {upstream_s:.0f} s, whole test {time.monotonic() - started:.0f} s")

    # the preflight's eval kind on the resumed run's checkpoint, locally: CI's own preflight leaves grpo and eval to
    # this test (.ci/preflight_shared.yaml), so GRPO's verl start-up is paid once per CI
    evaluated = subprocess.run([sys.executable, "-m", "snakemake", "results/preflight/eval/metrics.json", "--cores",
                                "2", "--configfile", "resume.yaml"], cwd=workflow_copy, env=env, capture_output=True,
                               text=True, timeout=900)
    eval_log = workflow_copy / "logs/preflight/eval.log"
    assert evaluated.returncode == 0, evaluated.stderr[-3000:] + (eval_log.read_text()[-3000:]
                                                                  if eval_log.exists() else "")
    metrics = json.loads((workflow_copy / "results/preflight/eval/metrics.json").read_text())
    assert metrics["prompts"] == section["eval"]["max_prompts"] and 0.0 <= metrics["pass@1_greedy"] <= 1.0, metrics
    assert "preflight_train" not in evaluated.stdout + evaluated.stderr  # the resumed run is what it evaluated


def test_ci_preflight_and_this_test_cover_every_preflight_kind():
    """CI's preflight (.ci/preflight_shared.yaml) leaves grpo and eval to the resume test above; together they must
    still run every kind of config/preflight.yaml, so a new kind is never left out of CI."""
    kinds = yaml.safe_load((REPO / "config/preflight.yaml").read_text())["preflight"]["kinds"]
    shared = yaml.safe_load((REPO / ".ci/preflight_shared.yaml").read_text())["preflight"]["kinds"]
    by_this_test = {"grpo", "eval"}
    assert not by_this_test & set(shared) and sorted({*shared, *by_this_test}) == sorted(kinds), (kinds, shared)
    assert "--configfile config/preflight.yaml .ci/preflight_shared.yaml" in (REPO / ".ci/run").read_text()


def check_resumed_run(workflow_copy: Path, output: str, checkpointed: int, limit_before: str, timing: str) -> None:
    """What the cut and resumed run must show (Slurm's record of both jobs, verl's files, the run's outputs)."""
    run_dir = workflow_copy / "results/preflight/grpo"
    # Slurm: attempt 1 cut by its time limit, attempt 2 submitted by the retry with the profile's second runtime
    jobs = submitted_job_ids(output)
    assert len(jobs) == 2, output
    cut_job, resumed_job = _job(jobs[0]), _job(jobs[1])
    assert (cut_job["JobState"], cut_job["Reason"]) == ("TIMEOUT", "TimeLimit"), cut_job
    assert resumed_job["JobState"] == "COMPLETED", resumed_job
    assert limit_before == f"00:{RUNTIME:02d}:00" and resumed_job["TimeLimit"] == f"00:{2 * RUNTIME:02d}:00"
    # the cut attempt's verl, Ray and vLLM processes went with it (none holds the CPUs or ports the retry needs)
    assert not _processes_of_job(jobs[0]), _processes_of_job(jobs[0])
    done = json.loads((run_dir / "DONE.json").read_text())
    assert done["final_step"] == done["total_steps"] == STEPS
    provenance = json.loads((run_dir / "DONE.json.prov.json").read_text())
    assert provenance["slurm"]["SLURM_JOB_ID"] == jobs[1], provenance["slurm"]

    # verl: attempt 1 trained past a checkpoint and stopped short; attempt 2 started after a checkpoint of attempt 1
    cut_attempt, resumed = _records(run_dir / "verl_metrics.0.jsonl"), _records(metrics_log_path(run_dir))
    assert not list(run_dir.glob("verl_metrics.1.jsonl"))  # two attempts of verl, no more
    cut_steps, resumed_steps = _trained(cut_attempt), _trained(resumed)
    assert cut_steps == list(range(1, len(cut_steps) + 1)) and checkpointed - 1 <= len(cut_steps) < STEPS, cut_steps
    resumed_from = resumed_steps[0] - 1
    assert resumed_steps == list(range(resumed_from + 1, STEPS + 1)), resumed_steps
    assert 1 <= resumed_from <= len(cut_steps), (resumed_from, cut_steps)
    assert 0 in cut_attempt and 0 not in resumed and resumed_from not in resumed  # one validation before training

    # the run's metrics: every step once, each from the attempt that finished it
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in metrics] == list(range(STEPS + 1))
    for row in metrics:
        step = row["step"]
        source = cut_attempt[step] if step <= resumed_from else resumed[step]
        assert {key: row[key] for key in source} == source, f"step {step}"
        assert step == 0 or row["training/global_step"] == step
    # the policies kept for the pass-rate probe survived the cut, each exported once at the end
    assert sorted(p.name for p in (run_dir / "probe").iterdir()) == ["step_10", "step_15", "step_5"]
    assert all((run_dir / "probe" / name / "config.json").is_file() for name in ("step_5", "step_10", "step_15"))
    rollouts = [json.loads(line)["step"] for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts == list(range(1, STEPS + 1))
    # a finished run keeps every site.rollout_dump_every-th dump and the last (prune.prune, after DONE.json)
    kept = sorted({step for step in range(1, STEPS + 1) if step % site_defaults()["rollout_dump_every"] == 0} | {STEPS})
    assert sorted(int(p.stem) for p in rollout_dump_dir(run_dir).glob("*.jsonl")) == kept
    # the job's own log: the preflight's step lines, each step once
    log = (workflow_copy / "logs/preflight/grpo.log").read_text()
    assert [int(s) for s in re.findall(r"\[preflight grpo\] verl step (\d+):", log)] == list(range(STEPS + 1))
    print(f"verl job cut by its time limit: {timing}; attempt 1 "
          f"(job {jobs[0]}) trained steps 1..{len(cut_steps)} (checkpoint {checkpointed} when cut), attempt 2 "
          f"(job {jobs[1]}) resumed from step {resumed_from}")


# --- the resume rules a cut at any moment needs (no Slurm) ---------------------------------------------------------


def _fake_run(run_dir: Path, checkpoints: list[int], tracker: int, logged: dict[int, bool], dumped: list[int]) -> None:
    """A run directory as verl leaves it: checkpoint folders, the tracker, the file logger's records, the dumps."""
    ckpt = checkpoint_dir(run_dir)
    for step in checkpoints:
        (ckpt / f"global_step_{step}" / "actor").mkdir(parents=True)
        (ckpt / f"global_step_{step}" / "data.pt").write_bytes(b"")
    (ckpt / "latest_checkpointed_iteration.txt").write_text(str(tracker))
    lines = [{"step": 0, "data": {"val-core/x": 0.5}}]
    lines += [{"step": step, "data": {"training/global_step": step, "actor/pg_loss": 0.1 * step}}
              for step, trained in logged.items() if trained]
    metrics_log_path(run_dir).write_text("".join(json.dumps(line) + "\n" for line in lines))
    rollout_dump_dir(run_dir).mkdir(parents=True)
    for step in dumped:
        (rollout_dump_dir(run_dir) / f"{step}.jsonl").write_text("{}\n")


@pytest.mark.parametrize("logged, dumped, resumes_from", [
    ({1: True, 2: True}, [1, 2], 2),     # cut after step 2 was logged: resume from its checkpoint
    ({1: True, 2: False}, [1], 1),       # cut between checkpoint 2 and its log: step 2 is redone from checkpoint 1
    ({1: True, 2: True}, [1], 1),        # logged, but its rollout dump (a background writer) never reached disk
    ({1: True, 2: False}, [1, 2], 1),
])
def test_a_checkpoint_whose_step_was_never_logged_is_redone(tmp_path, logged, dumped, resumes_from):
    """verl saves step k's checkpoint before it validates, dumps and logs step k: a job cut in between must not
    resume at k + 1 (step k's metrics and rollouts would be lost for good, and after the last step the run could
    never be collected)."""
    from pipeline_lib.jobs.engines.verl.train import finished_step, logged_resume_point

    _fake_run(tmp_path, [1, 2], 2, logged, dumped)
    assert logged_resume_point(tmp_path) == resumes_from
    ckpt = checkpoint_dir(tmp_path)
    assert finished_step(ckpt) == resumes_from
    kept = sorted(p.name for p in ckpt.glob("global_step_*"))
    assert kept == [f"global_step_{k}" for k in range(1, resumes_from + 1)]


def test_a_pruned_checkpoint_is_not_resumed(tmp_path):
    """verl prunes an old checkpoint to its data.pt: the rollback skips it for the newest one that still has its
    actor."""
    from pipeline_lib.jobs.engines.verl.train import finished_step, logged_resume_point

    _fake_run(tmp_path, [1, 2, 3], 3, {1: True, 2: True, 3: False}, [1, 2])
    shutil.rmtree(checkpoint_dir(tmp_path) / "global_step_2" / "actor")
    assert logged_resume_point(tmp_path) == 1 and finished_step(checkpoint_dir(tmp_path)) == 1


def test_an_unlogged_first_checkpoint_restarts_the_run_and_sft_is_left_alone(tmp_path):
    from pipeline_lib.jobs.engines.verl.train import finished_step, logged_resume_point

    _fake_run(tmp_path / "rl", [1], 1, {}, [])
    assert logged_resume_point(tmp_path / "rl") is None
    ckpt = checkpoint_dir(tmp_path / "rl")
    assert finished_step(ckpt) is None and not list(ckpt.iterdir())
    # verl's SFT trainer logs a step before it saves it: its tracker is taken as it is (the SFT entry point's own rule)
    from pipeline_lib.core.run_spec import RunSpec
    from pipeline_lib.jobs.engines.verl.sft import SFTRun

    _fake_run(tmp_path / "sft", [2], 2, {}, [])
    sft = SFTRun(RunSpec(method="sft", task="countdown_tiny", engine="verl"),
                 TrainPaths(tmp_path / "sft", tmp_path / "sft_train.parquet"), 0)
    assert sft.resume_point() == 2 and finished_step(checkpoint_dir(tmp_path / "sft")) == 2


def test_a_redone_step_keeps_only_the_later_attempts_record(tmp_path):
    """A step logged by the cut attempt and redone by the next is the next attempt's record, whole: no key of the cut
    attempt's record survives beside it."""
    from pipeline_lib.jobs.engines.verl.train import collect_metrics

    (tmp_path / "verl_metrics.0.jsonl").write_text("".join(json.dumps(line) + "\n" for line in [
        {"step": 0, "data": {"val-core/x": 0.1}},
        {"step": 1, "data": {"training/global_step": 1, "actor/pg_loss": 1.0}},
        {"step": 2, "data": {"training/global_step": 2, "actor/pg_loss": 2.0, "val-core/x": 0.2}}]) + '{"step": 3, "da')
    metrics_log_path(tmp_path).write_text(json.dumps({"step": 2, "data": {"training/global_step": 2,
                                                                          "actor/pg_loss": 2.5}}) + "\n")
    rows = [json.loads(line) for line in collect_metrics(tmp_path, 2).read_text().splitlines()]
    assert rows == [{"step": 0, "val-core/x": 0.1}, {"step": 1, "training/global_step": 1, "actor/pg_loss": 1.0},
                    {"step": 2, "training/global_step": 2, "actor/pg_loss": 2.5}]


def test_a_resumed_run_does_not_validate_again_before_training():
    from pipeline_lib.jobs.engines.verl.train import resumed_overrides

    overrides = ["trainer.val_before_train=true", "trainer.resume_mode=auto", "trainer.test_freq=4"]
    assert resumed_overrides(overrides) == ["trainer.val_before_train=false", *overrides[1:]]
