"""The Slurm profile against a real Slurm cluster: the tiny DAG's judge and paper stages and a 2-node Ray job through
sbatch.

The cluster is Debian's slurm-wlm + munge started by ``.ci/slurm/local_cluster.py`` (one controller,
two virtual nodes on this host). Without the Slurm binaries (or root) the tests skip, unless
``PIPELINE_REQUIRE_SLURM=1`` (set by ``.ci/run``), which turns the skip into a failure.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipeline_lib.plan import JOBS
from tests.conftest import REPO
from tests.slurm_helpers import PROFILE, RAY_LOCK, shared_cluster, snakemake_env, submitted_job_ids

NODES = {"ci-node1", "ci-node2"}


@pytest.fixture(scope="module")
def slurm_cluster():
    """A running local cluster (shared with the other Slurm test module; stopped by PID by its last user)."""
    with shared_cluster():
        yield


def _snakemake(cwd: Path, *args: str, timeout: float = 480) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snakemake", "--profile", str(PROFILE), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=snakemake_env())


PROBE_SNAKEFILE = """
rule all:
    input: "results/probe/ray_probe.json", expand("results/probe/throttled{i}.txt", i=range(3))


# Three API-style jobs that each hold the whole global `judge_requests` budget: they must run one at a time.
rule throttled:
    output: "results/probe/throttled{i}.txt"
    resources: judge_requests=2
    shell: "date +%s.%N > {output}; sleep 3; date +%s.%N >> {output}"


rule ray_probe:
    output: "results/probe/ray_probe.json"
    log: "logs/ray_probe.log"
    resources:
        nodes=2,
        gres="gpu:1",
        cpus_per_task=1,
        mem_mb=3000,
        runtime=45,
    shell:
        # 0) one Ray phase at a time on the CI host (tests.slurm_helpers.RAY_LOCK): waits while the resume test trains;
        # 1) Ray cannot detect the fake GPUs, yet the trainer's launch (no --declare-gpus) declares the allocation's
        #    GPU per node, so both nodes and 2 GPUs join; 2) with the GPUs Slurm gave each step declared, the same,
        #    and the probe runs a task on each node; a probe expecting a third node must fail.
        "exec 9>>RAY_LOCK_PATH; flock -w 2400 9;"
        " ( python -m pipeline_lib.jobs.engines.verl.launch --gpus-per-node 1 --timeout 120 --"
        " python -m pipeline_lib.jobs.engines.verl.ray_probe --expect-nodes 2 --expect-gpus 2 --timeout 30"
        " && python -m pipeline_lib.jobs.engines.verl.launch --gpus-per-node 1 --declare-gpus --object-store-mb 80"
        " --timeout 120 -- bash -c"
        " 'python -m pipeline_lib.jobs.engines.verl.ray_probe --expect-nodes 2 --expect-gpus 2 --out {output}"
        " && ! python -m pipeline_lib.jobs.engines.verl.ray_probe --expect-nodes 3 --timeout 10' ) > {log} 2>&1"
"""


@pytest.fixture(scope="module")
def probe_run(slurm_cluster, tmp_path_factory):
    """The 2-node job's Snakemake run, started in the background so it shares the cluster with the
    tiny DAG (the two together fit the time budget; one after the other would not)."""
    workdir = tmp_path_factory.mktemp("ray_probe")
    (workdir / "Snakefile").write_text(PROBE_SNAKEFILE.replace("RAY_LOCK_PATH", str(RAY_LOCK)))
    with open(workdir / "snakemake.out", "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "snakemake", "--profile", str(PROFILE), "--resources",
                                    "judge_requests=2"], cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                                   env=snakemake_env(), text=True)
    yield process, workdir
    if process.poll() is None:
        process.terminate()
        process.wait(60)


def test_slurm_profile_gives_every_rule_its_resources():
    """Resources live in profiles/slurm, not in rules: a new rule without an entry would run with the
    defaults (one CPU, 8 GB, one hour), which is never right for training and wastes GPUs elsewhere."""
    rules = set()
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        rules |= set(re.findall(r"^\s*rule (\w+):", smk.read_text(), re.MULTILINE))
    rules |= set(JOBS)  # the training rules, one per kind of job, are defined in a loop over the plan's JOBS
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    missing = sorted(rules - set(profile["set-resources"]))
    assert not missing, f"rules without resources in profiles/slurm/config.yaml: {missing}"
    for rule, resources in profile["set-resources"].items():
        # a multi-node job cannot carry a job-wide `gpu` count (the executor's srun -n1 step is one node)
        assert not (resources.get("nodes", 1) > 1 and "gpu" in resources), rule


def test_launcher_without_slurm_runs_the_command_and_returns_its_status():
    env = snakemake_env()
    result = subprocess.run([sys.executable, "-m", "pipeline_lib.jobs.engines.verl.launch", "--", sys.executable, "-c",
                             "import os, sys; print(os.environ.get('RAY_ADDRESS')); sys.exit(3)"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 3 and result.stdout.strip() == "None", result.stderr
    failing = subprocess.run([sys.executable, "-m", "pipeline_lib.jobs.engines.verl.launch", "--", "false"],
                             capture_output=True, text=True, env=env, timeout=60)
    assert failing.returncode == 1 and "without a Ray cluster" in failing.stderr


#: The stages whose jobs the Slurm test makes again through sbatch, on a copy of the main job's tree.
THROUGH_SLURM = ("results/judge", "results/paper")


def test_the_main_jobs_judge_and_paper_stages_run_through_sbatch(slurm_cluster, probe_run, main_tree, main_tree_copy):
    """The tiny default's DAG through sbatch, from where the main job's tree (tests/conftest.py main_tree) leaves its
    training and evaluation: the judge and paper stages are removed from a copy, and the Slurm profile makes them
    again, every job submitted by sbatch to the local cluster. The training and evaluation jobs are not run a second
    time (the main job ran them; the resume test runs a verl training job through sbatch).

    About 30 jobs, each of which starts Snakemake (parsing the workflow) and Python inside its Slurm job. The tables
    made through Slurm must equal the main job's own: the same DAG, another executor."""
    for stage in THROUGH_SLURM:
        shutil.rmtree(main_tree_copy / stage)
    start = time.monotonic()
    # the tiny default named (profiles/default, which names it for plain `snakemake`, yields to any --profile)
    result = _snakemake(main_tree_copy, "--configfile", "config/config.yaml", timeout=1500)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr[-6000:]
    output = result.stdout + result.stderr
    jobs = submitted_job_ids(output)
    finished = re.findall(r"^\[\d+/\d+ [^\]]+\] (\w+)", output, flags=re.M)  # one console line per job finished
    print(f"judge and paper stages through Slurm: {len(jobs)} sbatch jobs, {len(finished)} finished, {elapsed:.0f} s")
    assert len(jobs) == len(set(jobs)) == len([rule for rule in finished if rule != "all"]) > 20
    assert not {rule for rule in finished} & {"train_local", "train_local_group", "data_tiny"}, finished
    for table in ("table1", "ablation", "gradient_allocation"):
        made = (main_tree_copy / f"results/paper/tables/{table}.csv").read_text()
        assert made == (main_tree / f"results/paper/tables/{table}.csv").read_text(), table
    # every output was written inside a Slurm job of this run: its provenance sidecar names the job
    sidecars = [sidecar for stage in THROUGH_SLURM for sidecar in (main_tree_copy / stage).rglob("*.prov.json")]
    assert len(sidecars) > 20
    seen = set()
    for sidecar in sidecars:
        slurm = json.loads(sidecar.read_text())["slurm"]
        assert slurm.get("SLURM_JOB_ID") in jobs, f"{sidecar} was not written by a Slurm job of this run: {slurm}"
        seen.add(slurm["SLURM_JOB_ID"])
    assert len(seen) > 20


def test_two_node_job_runs_a_ray_cluster_across_both_nodes(probe_run):
    """One sbatch job on 2 nodes (GPUs per node via gres, the multi-node contract of profiles/slurm):
    the launcher starts a Ray head and a worker, a task runs on each Slurm node, Ray is stopped."""
    process, tmp_path = probe_run
    returncode = process.wait(2700)  # it may wait for the resume test's verl run (RAY_LOCK)
    output = (tmp_path / "snakemake.out").read_text()
    probe_log = tmp_path / "logs/ray_probe.log"
    assert returncode == 0, output[-4000:] + (probe_log.read_text()[-4000:] if probe_log.exists() else "")
    jobs = submitted_job_ids(output)
    assert len(jobs) == 4
    # the global resource throttles Slurm jobs too: the three `throttled` jobs never overlapped
    spans = sorted(tuple(map(float, (tmp_path / f"results/probe/throttled{i}.txt").read_text().split()))
                   for i in range(3))
    assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(spans)), spans
    report = json.loads((tmp_path / "results/probe/ray_probe.json").read_text())
    tasks = [node["task"] for node in report["nodes"]]
    assert report["alive_nodes"] == 2 and report["gpus"] == 2
    # each node's Ray has the job's CPUs and fake GPU per node (cpus_per_task=1, gres gpu:1), passed through by the
    # launcher: the CI nodes declare 3 CPUs each, which Ray would otherwise detect or fall back to the host's count
    assert [(node["resources"].get("CPU"), node["resources"].get("GPU")) for node in report["nodes"]] == [(1, 1)] * 2
    assert {task["slurm_node"] for task in tasks} == NODES
    assert len({task["slurm_job_id"] for task in tasks}) == 1 and tasks[0]["slurm_job_id"] in jobs
    log = (tmp_path / "logs/ray_probe.log").read_text()
    assert "Ray head on ci-node" in log
    # Ray detects no fake GPU: the trainer's launch (no --declare-gpus) declares the allocation's (issue 26)
    assert "each node declares 1 GPUs" in log and log.count("command exited with status 0") == 2
    assert "2 alive Ray nodes, expected 3" in log  # the probe fails when a node is missing
    # the Ray processes the launcher started (twice, plus any start-up retry: a node that died while starting on a
    # loaded host, which bring_up restarts on fresh ports) are gone: it stops them by PID, never by name
    attempts = log.count("Ray head on ci-node")
    retries = len(re.findall(r"start attempt \d+ of \d+ failed", log))
    assert attempts == 2 + retries
    pids = [int(pid) for pid in re.findall(r"stopped Ray (?:head|worker step) \(pid (\d+)\)", log)]
    assert 4 <= len(pids) <= 2 * attempts  # a node that died on its own is not stopped again
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]


@pytest.mark.parametrize("fields, expected", [
    ({"NumNodes": "2", "NumCPUs": "32", "TresPerNode": "gres/gpu:8"}, {"cpus": 16, "gpus": 8}),
    ({"NumNodes": "2", "NumCPUs": "4", "TresPerNode": "gres:gpu:h100:4"}, {"cpus": 2, "gpus": 4}),
    ({"NumNodes": "2", "NumCPUs": "2", "AllocTRES": "cpu=2,mem=6000M,node=2,gres/gpu=2"}, {"cpus": 1, "gpus": 1}),
    ({"NumNodes": "1", "NumCPUs": "8"}, {"cpus": 8}),
])
def test_the_job_resources_per_node_come_from_scontrol_fields(fields, expected):
    from pipeline_lib.jobs.engines.verl.launch import per_node_resources

    assert per_node_resources(fields) == expected


def test_each_nodes_ray_declares_the_allocations_gpus_without_being_asked(monkeypatch):
    """The trainer launches without --declare-gpus: `ray start` still gets the allocation's per-node GPUs, and a step
    that sees fewer devices than that fails before Ray places actors on devices it cannot reach."""
    from pipeline_lib.jobs.engines.verl.launch import node_gpus, ray_start_command

    args = argparse.Namespace(declare_gpus=False, node_gpus=None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    gpus = node_gpus(args, {"cpus": 96, "gpus": 8})
    command = ray_start_command("10.0.0.1", head_port=6379, join=None, gpus=gpus, cpus=96, object_store_mb=None,
                                temp_dir=Path("/tmp/r"))
    assert "--num-gpus=8" in command
    assert node_gpus(argparse.Namespace(declare_gpus=False, node_gpus=8), {}) == 8  # a worker: the head's count
    assert node_gpus(args, {}) is None  # outside Slurm Ray detects them
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(RuntimeError, match="8 GPUs per node but this step sees CUDA_VISIBLE_DEVICES=0,1"):
        node_gpus(args, {"gpus": 8})



def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def test_a_ray_node_that_dies_during_start_up_brings_the_cluster_up_again():
    """Ray gives a starting node 30 s to register; a loaded host can miss it (CI did). The launcher stops what it
    started and starts again; a node that never starts fails after the attempts, and a timeout is not retried."""
    from pipeline_lib.jobs.engines.verl.launch import RayStartError, bring_up

    stopped: list[str] = []

    def stop(process: subprocess.Popen, what: str) -> None:
        if process.poll() is None:
            process.kill()
        process.wait()
        stopped.append(what)

    def wait(still_starting) -> dict[str, float]:
        for _ in range(50):
            still_starting()
            time.sleep(0.1)
        return {"nodes": 2}

    starts = []

    def start_dying_once():
        starts.append(len(starts))
        head = _python("import time; time.sleep(60)")
        worker = _python("raise SystemExit(1)" if len(starts) == 1 else "import time; time.sleep(60)")
        return [(head, f"head {len(starts)}"), (worker, f"worker {len(starts)}")]

    processes, joined = bring_up(start_dying_once, wait, 3, stop)
    assert joined == {"nodes": 2} and len(starts) == 2
    assert stopped == ["worker 1", "head 1"]  # the first attempt's processes, nothing of the second
    assert all(process.poll() is None for process, _ in processes)
    for process, what in processes:
        stop(process, what)

    stopped.clear()
    with pytest.raises(RayStartError, match=r"worker exited with status 1 .*start attempt 2 of 2"):
        bring_up(lambda: [(_python("import time; time.sleep(60)"), "head"), (_python("raise SystemExit(1)"),
                                                                             "worker")], wait, 2, stop)
    assert stopped == ["worker", "head"] * 2

    def wait_times_out(still_starting):
        raise TimeoutError("only 1/2 Ray nodes joined")

    stopped.clear()
    starts.clear()
    with pytest.raises(TimeoutError):
        bring_up(start_dying_once, wait_times_out, 3, stop)
    assert len(starts) == 1 and stopped == ["worker 1", "head 1"]
