"""A cluster's first day (issue 44): `fetch` fills the hub cache on the submit host (against a hub on 127.0.0.1),
every job reads it offline, and the GPU canary's checks, each on recorded outputs, with the CPU path through the real
entry point; the paper plan's dry run puts `gpu_canary` before every GPU job and `fetch` on the submit host."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from pipeline_lib.jobs.canary import (
    check_cache,
    check_disk,
    check_driver,
    check_gpus,
    check_nccl,
    check_nccl_nodes,
    check_vllm,
    nodes_command,
    parse_quota,
    read_quota,
)
from pipeline_lib.plan.hub import LM_EVAL_DATASETS, HubRepo, is_hub_id, load_repos, repos_json
from tests.conftest import NO_CONDA, REPO, repo_env, snakemake
from tests.hub_server import HubServer, Repo

FIXTURES = REPO / "tests" / "fixtures" / "site"
GATED = "Idavidrein/gpqa"
README = b"---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n---\n"


def _parquet() -> bytes:
    buffer = io.BytesIO()
    pd.DataFrame({"question": ["1+1", "2+2"], "answer": ["2", "4"]}).to_parquet(buffer)
    return buffer.getvalue()


def _hub_repos() -> dict[tuple[str, str], Repo]:
    return {("model", "org/tiny-model"): Repo({"config.json": b'{"model_type": "qwen2"}',
                                              "model.safetensors": b"\0" * 64}),
            ("dataset", "org/tiny-data"): Repo({"README.md": README, "main/train-00000-of-00001.parquet": _parquet()}),
            ("dataset", GATED): Repo({"README.md": README, "main/train-00000-of-00001.parquet": _parquet()},
                                     gated=True)}


WANTED = [HubRepo("model", "org/tiny-model", why="train.verl.model"),
          HubRepo("dataset", "org/tiny-data", why="data.datasets.x.sources.main", configs=("main",))]


def run_fetch(tmp_path: Path, hub: HubServer, repos: list[HubRepo], token: str | None = None, relock: bool = True,
              download: bool = True, extra_env: dict[str, str] | None = None):
    """``python -m pipeline_lib.jobs.fetch`` as the local rule runs it (its lock ``tmp_path/hub.lock.json``), against
    the hub on 127.0.0.1; ``relock`` pins the repositories first (``--relock``), ``download`` fetches them."""
    (tmp_path / "repos.json").write_text(repos_json(repos))
    env = {key: value for key, value in repo_env().items() if not key.startswith("HF_")}
    env |= {"HF_ENDPOINT": hub.url, **({"HF_TOKEN": token} if token else {}), **(extra_env or {})}
    command = [sys.executable, "-m", "pipeline_lib.jobs.fetch", "--repos", str(tmp_path / "repos.json"), "--lock",
               str(tmp_path / "hub.lock.json"), *(["--relock"] if relock else []),
               *(["--hf-home", str(tmp_path / "hf"), "--out", str(tmp_path / "fetch.json")] if download else [])]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


# --- fetch ----------------------------------------------------------------------------------------------------------

def test_fetch_fills_the_cache_that_offline_jobs_and_the_canary_read(tmp_path):
    with HubServer(_hub_repos()) as hub:
        result = run_fetch(tmp_path, hub, WANTED)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "fetch.json").read_text())
    assert {row["repo_id"]: row["files"] for row in report["repos"]} == {"org/tiny-model": 2, "org/tiny-data": 2}
    assert (tmp_path / "fetch.json.prov.json").is_file()
    assert check_cache(WANTED, tmp_path / "hf").ok
    # a job on an offline node: the hub's address is dead, the dataset and model come from HF_HOME alone
    offline = {key: value for key, value in repo_env().items() if not key.startswith("HF_")}
    offline |= {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "HF_ENDPOINT": "http://127.0.0.1:9"}
    script = ("import datasets, huggingface_hub\n"
              "print(len(datasets.load_dataset('org/tiny-data', 'main')['train']))\n"
              "print(huggingface_hub.snapshot_download('org/tiny-model'))\n")
    job = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=offline)
    assert job.returncode == 0, job.stderr[-3000:]
    assert job.stdout.splitlines()[0] == "2" and "models--org--tiny-model" in job.stdout


def test_a_gated_repository_without_a_token_stops_before_any_download(tmp_path):
    gated = [*WANTED, HubRepo("dataset", GATED, why="eval.transfer.lm_eval.tasks (gpqa_main_zeroshot)",
                              configs=("main",))]
    with HubServer(_hub_repos(), tokens={"hf_good"}) as hub:
        refused = run_fetch(tmp_path, hub, gated)
        downloads = [line for line in hub.requests if "/resolve/" in line or "/tree/" in line]
        assert refused.returncode == 1
        assert GATED in refused.stderr and "HF_TOKEN" in refused.stderr and "lm_eval" in refused.stderr
        assert not downloads and not (tmp_path / "fetch.json").exists()
        allowed = run_fetch(tmp_path, hub, gated, token="hf_good")
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert check_cache(gated, tmp_path / "hf").ok


# --- the hub lock (issue 57 item 8) ---------------------------------------------------------------------------------

def test_a_relock_pins_each_repository_and_fetch_and_offline_jobs_read_that_commit(tmp_path):
    """`--relock` writes each repository's commit (asked of the hub) into the lock; `fetch` then downloads exactly
    that commit, points the cache's ``refs/main`` at it (what an offline job's read of the name resolves to), and the
    report and every provenance sidecar written with the lock exported carry the commits. A repository the lock does
    not hold is refused by name, before any download, until relocked on purpose."""
    from huggingface_hub import HfApi

    with HubServer(_hub_repos()) as hub:
        pinned = run_fetch(tmp_path, hub, WANTED, download=False)
        assert pinned.returncode == 0, pinned.stderr[-3000:]
        truth = {f"{r.repo_type}:{r.repo_id}@main": HfApi(endpoint=hub.url).repo_info(
            r.repo_id, repo_type=r.repo_type).sha for r in WANTED}
        lock = json.loads((tmp_path / "hub.lock.json").read_text())["repos"]
        assert lock == truth
        assert not (tmp_path / "hf").exists()  # a relock alone downloads nothing
        lock_env = {"PIPELINE_HUB_LOCK": str(tmp_path / "hub.lock.json")}
        fetched = run_fetch(tmp_path, hub, WANTED, relock=False, extra_env=lock_env)
        assert fetched.returncode == 0, fetched.stderr[-3000:]
        # a repository the lock does not hold: refused by name, nothing downloaded
        before = len(hub.requests)
        extra = [*WANTED, HubRepo("dataset", GATED, why="eval.transfer.lm_eval.tasks (gpqa_main_zeroshot)")]
        refused = run_fetch(tmp_path, hub, extra, relock=False, token="hf_good")
        assert refused.returncode == 1 and f"dataset {GATED} (revision main" in refused.stderr
        assert "pipeline_lib hub-lock" in refused.stderr and len(hub.requests) == before
    report = json.loads((tmp_path / "fetch.json").read_text())
    assert {f"{row['repo_type']}:{row['repo_id']}@main": row["commit"] for row in report["repos"]} == truth
    for repo in WANTED:
        folder = tmp_path / "hf" / "hub" / f"{repo.repo_type}s--{repo.repo_id.replace('/', '--')}"
        assert (folder / "refs" / "main").read_text() == truth[f"{repo.repo_type}:{repo.repo_id}@main"]
    sidecar = json.loads((tmp_path / "fetch.json.prov.json").read_text())
    assert sidecar["params"]["commits"] == truth and sidecar["hub_revisions"] == truth


def test_the_plan_refuses_a_run_reading_an_unpinned_repository_and_the_tiny_default_needs_no_lock(workflow_copy):
    """The paper plan without a hub lock: its dry run warns naming each repository and the relock command; a real run
    is refused before any job starts (onstart), naming them. The tiny default reads no hub: no lock, no warning."""
    from pipeline_lib.plan.hub import HUB_LOCK, hub_lock_problems

    assert not (workflow_copy / HUB_LOCK).exists()
    env = {"HF_ENDPOINT": "http://127.0.0.1:9"}  # nothing may reach a hub if the refusal failed
    plan = snakemake(workflow_copy, "-n", "--configfile", "config/paper.yaml", *NO_CONDA, env=env)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "a run refuses this" in plan.stderr and "model Qwen/Qwen2.5-1.5B (revision main" in plan.stderr
    assert "python -m pipeline_lib hub-lock --configfile" in plan.stderr
    run = snakemake(workflow_copy, "fetch", "--cores", "1", "--configfile", "config/paper.yaml", *NO_CONDA, env=env)
    assert run.returncode != 0 and "HubLockError" in run.stderr and "tatsu-lab/alpaca_eval" in run.stderr
    assert not (workflow_copy / "results/site/fetch.json").exists()
    tiny = snakemake(workflow_copy, "-n", env=env)
    assert tiny.returncode == 0 and "hub lock" not in tiny.stderr
    # a lock entry at another revision is not the one asked: the repository is named again
    lock = workflow_copy / "lock.json"
    lock.write_text(json.dumps({"repos": {"model:org/tiny-model@v2": "0" * 40}}))
    assert hub_lock_problems([HubRepo("model", "org/tiny-model", why="train.verl.model")], lock) == [
        f"model org/tiny-model (revision main, from train.verl.model) is not in {lock}"]


def test_lm_eval_datasets_match_lm_evals_own_task_files():
    """Each LM_EVAL_DATASETS row names the ``dataset_path`` of the task's YAML (or its group's) in the installed
    lm_eval, so `fetch` downloads what lm-eval will read."""
    import lm_eval

    tasks_dir = Path(lm_eval.__file__).parent / "tasks"
    files = {path: path.read_text(errors="replace") for path in tasks_dir.rglob("*")  # templates: *_yaml
             if path.is_file() and (path.suffix == ".yaml" or path.name.endswith("_yaml"))}
    for task, dataset in LM_EVAL_DATASETS.items():
        defining = [path for path, text in files.items()
                    if re.search(rf"^(task|group): {re.escape(task)}\s*$", text, re.M)]
        assert defining, f"lm_eval defines no task or group {task!r}"
        folder = defining[0].parent
        paths = {m for path, text in files.items() if folder in path.parents or path.parent == folder
                 for m in re.findall(r"^dataset_path: *(\S+)", text, re.M)}
        assert dataset in paths, (task, sorted(paths))


# --- the canary's checks, on recorded outputs -----------------------------------------------------------------------

def test_an_old_driver_is_refused_naming_the_driver_it_needs():
    old = (FIXTURES / "nvidia_smi_535.txt").read_text()
    new = (FIXTURES / "nvidia_smi_580.txt").read_text()
    refused = check_driver(old, "13.0")
    assert not refused.ok and "535.129.03" in refused.detail and ">= 580" in refused.fix
    assert "relock" in refused.fix
    assert check_driver(new, "13.0").ok
    assert check_driver(old, "12.2").ok  # a lock built for CUDA 12.2 runs on R535
    assert not check_driver(old, None).ok  # a CPU torch in a GPU job
    assert not check_driver("NVIDIA-SMI has failed", "13.0").ok


def test_torch_must_see_every_gpu_the_node_lists():
    listing = (FIXTURES / "nvidia_smi_L_2.txt").read_text()
    assert check_gpus(2, listing).ok
    hidden = check_gpus(1, listing)
    assert not hidden.ok and "1 GPU(s)" in hidden.detail and "lists 2" in hidden.detail and hidden.fix


def _needs(one: float, at_once: float, jobs: float = 8.0) -> dict[str, float]:
    return {"one": one, "at_once": at_once, "jobs": jobs}


def _no_quota(root):
    return None, "no quota tool"


def test_the_disk_fails_only_when_the_next_job_cannot_fit_and_warns_with_the_numbers():
    recorded = json.loads((FIXTURES / "statvfs_full.json").read_text())

    def statvfs(root):
        return SimpleNamespace(**recorded[root])

    local = {"filesystem": lambda root: "ext4"}
    full = check_disk({"/home": _needs(50, 500), "/scratch": _needs(40, 900)}, statvfs, _no_quota, **local)
    assert not full.ok and "/scratch: 12 GB of room" in full.detail and "the largest job needs 40 GB" in full.detail
    assert "/home" not in full.detail and full.fix
    # room for the largest job but not for all that may run at once: passes, with the numbers
    crowded = check_disk({"/home": _needs(50, 500), "/scratch": _needs(10, 900)}, statvfs, _no_quota, **local)
    assert crowded.ok and crowded.warn and "up to 8 at once" in crowded.detail and "900 GB" in crowded.detail
    assert "`jobs`" in crowded.fix
    assert not check_disk({"/home": _needs(50, 500), "/scratch": _needs(10, 11)}, statvfs, _no_quota, **local).warn
    recorded["/scratch"]["f_fsid"] = recorded["/home"]["f_fsid"]  # one filesystem: 2,000 GB free
    recorded["/scratch"]["f_bavail"] = recorded["/home"]["f_bavail"]
    assert not check_disk({"/home": _needs(1100, 1100), "/scratch": _needs(1000, 1000)}, statvfs, _no_quota,
                          **local).ok
    # a network filesystem whose quota cannot be read: passes, warning that the room may be smaller
    unsure = check_disk({"/home": _needs(5, 5)}, statvfs, _no_quota, filesystem=lambda root: "lustre")
    assert unsure.ok and unsure.warn and "lustre filesystem whose quota could not be read" in unsure.detail


def test_quotas_are_read_from_lfs_and_quota_and_limit_the_room():
    """Outputs in the layout of `lfs quota -u USER PATH` (Lustre's manual) and `quota -u -w -f MOUNT` (quota-tools),
    written by hand from those layouts (no cluster here to record them on): KiB columns, `*` past the soft limit,
    a long filesystem name on its own line, a user with no quota."""
    lustre = parse_quota((FIXTURES / "lfs_quota.txt").read_text(), "lfs")
    assert lustre.used_gb == pytest.approx(4_882_812_500 * 1024 / 1e9)
    assert lustre.limit_gb == pytest.approx(5_000_000_000 * 1024 / 1e9)  # the hard limit
    assert lustre.room_gb == pytest.approx((5_000_000_000 - 4_882_812_500) * 1024 / 1e9)  # ~120 GB
    home = parse_quota((FIXTURES / "quota.txt").read_text(), "quota")
    assert home.limit_gb == pytest.approx(107_421_875 * 1024 / 1e9) and home.room_gb > 50
    assert parse_quota((FIXTURES / "quota_none.txt").read_text(), "quota") is None
    ran = []

    def fake(command):
        ran.append(command)
        return (FIXTURES / "lfs_quota.txt").read_text() if command[0] == "lfs" else None

    assert read_quota("/", fake)[0] is None or ran  # the root filesystem here: quota tried, whatever it says
    roomy = SimpleNamespace(f_bavail=10**12 // 4096, f_frsize=4096, f_fsid=1)  # 1,000 TB free on the filesystem
    capped = check_disk({"/lustre": _needs(200, 300)}, lambda root: roomy, lambda root: (lustre, "lfs"),
                        filesystem=lambda root: "lustre")
    assert not capped.ok and "120 GB of room" in capped.detail and "quota 5000 of 5120 GB used by lfs" in capped.detail


def test_the_paper_plans_disk_needs_follow_what_runs_at_once():
    """The canary no longer asks for every run's scratch as if all ran at once: with the profile's `jobs` it asks for
    the largest job (to fail) and the largest stage's `jobs` biggest runs (to warn)."""
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.estimates import disk_needs, estimates, run_stages
    from pipeline_lib.plan.site import site_disk_needs
    from pipeline_lib.plan.table import load_config

    config = load_config([REPO / "config" / "paper.yaml"], REPO / "workflow" / "schemas" / "config.schema.yaml")
    plan = plan_runs(config)
    found = estimates(config, plan)
    scratch = sorted((e.scratch_gb for e in found.values()), reverse=True)
    needs = site_disk_needs(config, plan, jobs=4)
    root = config["site"]["scratch_root"] if config.get("site", {}).get("scratch_root") else "results/scratch"
    assert needs[root]["one"] == pytest.approx(scratch[0])
    assert needs[root]["jobs"] == 4 and needs[root]["at_once"] <= sum(scratch[:4]) + 1e-9
    assert needs[root]["at_once"] < disk_needs(config, plan)["scratch"]
    assert needs["results"]["at_once"] == pytest.approx(disk_needs(config, plan)["results"])
    stages = run_stages(plan)
    assert set(stages) >= set(found) and min(stages.values()) == 0


def test_a_missing_cache_entry_is_named(tmp_path):
    with HubServer(_hub_repos()) as hub:
        assert run_fetch(tmp_path, hub, WANTED).returncode == 0
    assert check_cache(WANTED, tmp_path / "hf").ok
    teacher = HubRepo("model", "Qwen/Qwen3-8B", why="train.baselines.opd.teacher.hub")
    missing = check_cache([*WANTED, teacher], tmp_path / "hf")
    assert not missing.ok and "Qwen/Qwen3-8B (train.baselines.opd.teacher.hub)" in missing.detail
    assert "snakemake fetch" in missing.fix
    for snapshot in (tmp_path / "hf" / "hub" / "datasets--org--tiny-data" / "snapshots").iterdir():
        for path in sorted(snapshot.rglob("*"), reverse=True):
            path.unlink() if not path.is_dir() else path.rmdir()
    assert "org/tiny-data" in check_cache(WANTED, tmp_path / "hf").detail


def test_the_all_reduce_runs_one_process_per_device_and_is_bounded():
    """The NCCL check's code (one process per GPU, an all-reduce with known sums) with gloo on CPU; a timeout too
    short for the processes to start is a failure with a fix, not a hang."""
    check = check_nccl(2, backend="gloo", timeout=240)
    assert check.ok, check.detail
    hung = check_nccl(2, backend="gloo", timeout=0.05)
    assert not hung.ok and "hung past" in hung.detail and "NCCL_DEBUG" in hung.fix


def test_the_two_node_all_reduce_runs_one_srun_task_per_gpu_and_its_tasks_meet(tmp_path):
    """The 2-node check's srun line, and its tasks' code: four srun tasks (2 nodes x 2 GPUs, as Slurm numbers them)
    run here with gloo and meet at the master's port; a failing or hanging srun is a failure with a fix."""
    command = nodes_command(2, 8, "node001", 29500)
    assert command[:5] == ["srun", "--nodes=2", "--ntasks-per-node=8", "--ntasks=16", "--kill-on-bad-exit=1"]
    assert command[-9:] == ["-m", "pipeline_lib.jobs.canary", "allreduce-task", "--master", "node001", "--port",
                            "29500", "--backend", "nccl"]
    port = str(29_000 + (hash(str(tmp_path)) % 1000))
    tasks = [subprocess.Popen([sys.executable, "-m", "pipeline_lib.jobs.canary", "allreduce-task", "--master",
                               "127.0.0.1", "--port", port, "--backend", "gloo"],
                              env=repo_env() | {"SLURM_PROCID": str(rank), "SLURM_NTASKS": "4",
                                                "SLURM_LOCALID": str(rank % 2)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(4)]
    results = [task.communicate(timeout=240) for task in tasks]
    assert [task.returncode for task in tasks] == [0] * 4, [err[-500:] for _, err in results]
    ran = []

    def fake_srun(command, **kwargs):
        ran.append(command)
        return SimpleNamespace(returncode=1, stdout="", stderr="NCCL WARN NET/IB : No device found\nerror")

    failed = check_nccl_nodes(2, 8, runner=fake_srun)
    assert not failed.ok and "2 nodes x 8 GPUs" in failed.detail and "NCCL_SOCKET_IFNAME" in failed.fix
    assert ran[0][:2] == ["srun", "--nodes=2"]

    def hang(command, **kwargs):
        raise subprocess.TimeoutExpired(command, 1)

    assert "hung past" in check_nccl_nodes(2, 8, runner=hang, timeout=1).detail


def test_vllm_fails_with_a_fix_for_a_model_not_in_the_cache(tmp_path):
    pytest.importorskip("vllm")
    check = check_vllm("org/not-fetched", tmp_path / "hf", timeout=300)
    assert not check.ok and "org/not-fetched" in check.detail and "snakemake fetch" in check.fix


def test_the_cpu_entry_point_says_no_gpu_and_exits_non_zero(tmp_path):
    (tmp_path / "repos.json").write_text(repos_json(WANTED))
    (tmp_path / "disk.json").write_text(json.dumps({str(tmp_path): {"one": 1.0, "at_once": 1.0, "jobs": 1}}))
    result = subprocess.run([sys.executable, "-m", "pipeline_lib.jobs.canary", "--repos", str(tmp_path / "repos.json"),
                             "--disk", str(tmp_path / "disk.json"), "--hf-home", str(tmp_path / "hf"),
                             "--model", "org/tiny-model", "--out", str(tmp_path / "canary.json")],
                            capture_output=True, text=True, timeout=300, env=repo_env() | {"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 1
    assert "FAIL gpu: no GPU" in result.stderr
    assert "FAIL cache: 2 of 2 missing" in result.stderr  # the cheap checks still report
    assert "ok   disk" in result.stderr
    assert not (tmp_path / "canary.json").exists()


# --- the workflow ---------------------------------------------------------------------------------------------------

def _jobs(dry_run: str) -> list[dict[str, Any]]:
    """Each job block of a full-console dry run: rule, input and resources lines, its shell command (with ``-p``) and
    whether Snakemake runs it as a local job (``localrule``: on the submit host)."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", dry_run):
        name = re.match(r"(local)?rule (\w+):\n", block)
        if name:
            fields = dict(re.findall(r"^    (input|resources): (.*)$", block, re.M))
            shell = re.search(r"^Shell command: (.*)$", block, re.M)
            jobs.append({"rule": name.group(2), "local": bool(name.group(1)), "shell": shell[1] if shell else "",
                         **fields})
    return jobs


def _asks_gpu(resources: str) -> bool:
    return bool(re.search(r"\bgres=[^,]*gpu:\d", resources) or re.search(r"\bgpus?=[1-9]", resources))


def _local_rules(workdir: Path, configfile: str) -> set[str]:
    """The rules Snakemake runs on the submit host (``workflow.is_local``: its `localrules`), parsed with
    ``configfile`` (a dry run prints every job as ``rule``, local or not)."""
    script = ("import sys\nfrom pathlib import Path\nfrom snakemake.api import SnakemakeApi\n"
              "from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings\n"
              "with SnakemakeApi(OutputSettings(quiet=True)) as api:\n"
              "    flow = api.workflow(resource_settings=ResourceSettings(), snakefile=Path('Snakefile'),\n"
              "        config_settings=ConfigSettings(configfiles=[Path(sys.argv[1])]), workdir=Path('.'))\n"
              "    print(' '.join(r.name for r in flow._workflow.rules if flow._workflow.is_local(r)))\n")
    result = subprocess.run([sys.executable, "-c", script, configfile], cwd=workdir, capture_output=True,
                            text=True, timeout=600, env=repo_env())
    assert result.returncode == 0, result.stderr[-3000:]
    return set(result.stdout.strip().splitlines()[-1].split())


def _is_local(workdir: Path, rule: str, configfile: str) -> bool:
    return rule in _local_rules(workdir, configfile)


def test_the_paper_plan_runs_the_canary_before_every_gpu_job_and_fetches_every_hub_id(workflow_copy):
    result = snakemake(workflow_copy, "-n", "-p", "--profile", "profiles/slurm", "--configfile", "config/paper.yaml",
                       *NO_CONDA, full_console=True)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = _jobs(result.stdout)
    gpu_jobs = [job for job in jobs if _asks_gpu(job.get("resources", "")) and not job["rule"].startswith("gpu_canary")]
    assert {job["rule"] for job in gpu_jobs} >= {"train_verl", "train_trl", "annotate_rationales", "train_imagenet",
                                                 "eval_checkpoint", "eval_lm_eval", "eval_alpaca_generate",
                                                 "judge_score"}
    late = sorted({job["rule"] for job in gpu_jobs if "results/site/canary.json" not in job.get("input", "")})
    assert not late, f"GPU jobs that do not wait for gpu_canary: {late}"
    assert [job["rule"] for job in jobs].count("gpu_canary") == 1
    assert [job["rule"] for job in jobs].count("fetch") == 1
    canary = next(job for job in jobs if job["rule"] == "gpu_canary")
    assert "results/site/fetch.json" in canary["input"] and "gres=gpu:8" in canary["resources"]
    assert "nodes=2" in canary["resources"]  # the plan's 2-node jobs: NCCL across two nodes
    assert "--nodes 2" in result.stdout
    # vLLM started in the eval and judge envs before the canary's report, which every GPU job waits for
    for env in ("eval", "judge"):
        assert f"results/site/vllm_{env}.json" in canary["input"]
        assert f"canary vllm --env {env}" in result.stdout
    # the canary is never retried; the long jobs get Snakemake's attempt to record why each one ended
    assert "retries: 0" in (workflow_copy / "workflow/rules/site.smk").read_text()
    assert re.search(r"SOFTMAXGRPO_ATTEMPT=1 \S+ -m pipeline_lib.jobs.engines.verl.(train|sft)", result.stdout)
    assert all("results/site/fetch.json" in job["input"] for job in jobs if job["rule"] == "data_build")
    assert _is_local(workflow_copy, "fetch", "config/paper.yaml")
    # every hub id the plan's commands and spec files name is in the repositories `fetch` downloads
    fetch_line = next(line for line in result.stdout.splitlines() if "pipeline_lib.jobs.fetch" in line)
    fetched = {repo.repo_id for repo in load_repos(workflow_copy / re.search(r"--repos (\S+)", fetch_line)[1])}
    named = set()
    for line in result.stdout.splitlines():
        if line.startswith("Shell command: ") and "pipeline_lib.jobs.fetch" not in line:
            for token in line.split():
                path = workflow_copy / token
                texts = [token, path.read_text()] if token.endswith(".json") and path.is_file() else [token]
                for text in texts:
                    named |= {m for m in [*re.findall(r'"([A-Za-z][\w.-]*/[\w.-]+)"', text), text]
                              if re.fullmatch(r"[A-Za-z][\w.-]*/[\w.-]+", m)
                              and not m.startswith(("results/", "logs/", "config/", "profiles/"))
                              and not m.endswith((".json", ".parquet", ".yaml", ".jsonl", ".csv", ".log"))}
    named = {name for name in named if is_hub_id(name)}
    assert {"Qwen/Qwen2.5-1.5B", "Qwen/Qwen3-8B", "openai/gsm8k"} <= named, sorted(named)
    assert named <= fetched, sorted(named - fetched)
    assert GATED in fetched and "cais/mmlu" in fetched


#: What needs outbound network, read off a job's command with its spec files (issue 57 item 2), not off the
#: workflow's own list: `fetch`, a dataset build that synthesises instructions through an endpoint, and AlpacaEval's
#: annotation (``alpaca-eval`` without ``-generate``: the annotator's API).
_ONLINE = re.compile(r"pipeline_lib\.jobs\.fetch|pipeline_lib\.core\.data\.build real .*\"synthesis\": \{"
                     r"|pipeline_lib\.jobs\.eval\.harness alpaca-eval (?!.*alpaca-eval-generate)")


def test_the_paper_plan_goes_online_only_on_the_submit_host_and_reads_the_hub_only_after_fetch(workflow_copy):
    """The paper plan's dry-run under the Slurm profile: every job that needs outbound network is a local job (the
    submit host), and they are the steps docs/usage.md names (ONLINE_STEPS); no cluster job's command reaches the
    network; every job whose command or spec names a hub repository waits for `fetch` (its report among the job's
    inputs), the train_local base jobs (``--init Qwen/Qwen2.5-1.5B``) included; AlpacaEval's instructions come
    from the fetched tatsu-lab/alpaca_eval, not a file saved by hand."""
    from pipeline_lib.plan.site import ONLINE_STEPS
    from tests.conftest import with_specs

    result = snakemake(workflow_copy, "-n", "-p", "--profile", "profiles/slurm", "--configfile", "config/paper.yaml",
                       *NO_CONDA, full_console=True)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = _jobs(result.stdout)
    local = _local_rules(workflow_copy, "config/paper.yaml")
    for job in jobs:
        job["text"] = with_specs(job["shell"], workflow_copy)
        job["local"] = job["rule"] in local
    online = [job for job in jobs if _ONLINE.search(job["text"])]
    assert {job["rule"] for job in online} == set(ONLINE_STEPS), sorted({job["rule"] for job in online})
    on_nodes = sorted({job["rule"] for job in online if not job["local"]})
    assert not on_nodes, f"jobs that need the network but are submitted to a compute node: {on_nodes}"
    assert all(job["local"] for job in jobs if job["rule"] in ONLINE_STEPS)
    assert "alpaca_eval" not in (workflow_copy / "config/paper.yaml").read_text()  # no file to save by hand

    fetch_line = next(job["shell"] for job in jobs if job["rule"] == "fetch")
    fetched = {repo.repo_id for repo in load_repos(workflow_copy / re.search(r"--repos (\S+)", fetch_line)[1])}
    assert "tatsu-lab/alpaca_eval" in fetched
    late = {}
    for job in jobs:
        if job["rule"] == "fetch":
            continue
        named = {m for m in re.findall(r"[A-Za-z][\w.-]*/[\w.-]+", job["text"]) if m in fetched}
        if named and "results/site/fetch.json" not in job.get("input", ""):
            late.setdefault(job["rule"], set()).update(named)
    assert not late, f"jobs that read the hub without waiting for fetch: {late}"
    readers = {job["rule"] for job in jobs if "results/site/fetch.json" in job.get("input", "")}
    assert {"train_local", "train_verl", "data_build", "data_build_online", "eval_alpaca_generate",
            "gpu_canary"} <= readers, sorted(readers)


def test_the_tiny_default_plans_neither_fetch_nor_canary_and_jobs_run_offline(workflow_copy):
    result = snakemake(workflow_copy, "-n", "-p", full_console=True)
    assert result.returncode == 0, result.stderr[-3000:]
    rules = {job["rule"] for job in _jobs(result.stdout)}
    assert rules and not rules & {"fetch", "gpu_canary"}
    paper = snakemake(workflow_copy, "-n", "--configfile", "config/paper.yaml", "--config",
                      "site={hf_home: /shared/hf}", "-p", full_console=True)
    assert paper.returncode == 0, paper.stderr[-3000:]
    assert "--hf-home /shared/hf" in paper.stdout
    from pipeline_lib.plan.hub import offline_exports

    assert offline_exports({"site": {"hf_home": "/shared/hf"}}) == \
        "export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HOME=/shared/hf; "
    assert offline_exports({"site": {"hf_home": None}}) == "export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1; "
    assert offline_exports({"site": {}}, "config/hub.lock.json") == \
        "export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PIPELINE_HUB_LOCK=config/hub.lock.json; "
    assert "+ offline_exports(config, HUB_LOCK if HUB_REPOS else None)" in (
        workflow_copy / "workflow/rules/common.smk").read_text()


# --- the site block (issue 57 item 7) -------------------------------------------------------------------------------

def test_a_large_default_under_home_is_warned_about_naming_the_setting_that_moves_it(tmp_path, monkeypatch):
    """The paper plan with the site block's defaults and $HOME holding the checkout: the hub cache, the conda envs,
    the results and the scratch each warn, naming their key; set elsewhere, none does. The tiny default warns of
    nothing (no hub, no verl run; its conda envs are the default profile's, none)."""
    from pipeline_lib.plan import plan_runs
    from pipeline_lib.plan.hub import hub_repos
    from pipeline_lib.plan.site import home_warnings
    from pipeline_lib.plan.table import load_config

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    paper = load_config([REPO / "config/paper.yaml"])
    plan = plan_runs(paper, check_estimators=False)
    repos = hub_repos(paper, plan)
    lines = home_warnings(paper, plan, repos, str(tmp_path / ".snakemake-conda"), str(tmp_path / ".cache/hf"))
    assert [line.split(" (")[0] for line in lines] == ["the hub cache", "the conda envs", "the results",
                                                       "verl's scratch"], lines
    for key in ("site.hf_home", "conda-prefix", "site.results_root", "site.scratch_root"):
        assert any(key in line for line in lines), key
    assert "the plan's estimate" in lines[2]
    shared = {**paper, "site": {**paper["site"], "results_root": "/shared/r", "scratch_root": "/shared/s"}}
    assert home_warnings(shared, plan, repos, "/shared/conda", "/shared/hf") == []
    tiny = load_config([REPO / "config/config.yaml"])
    tiny_plan = plan_runs(tiny, check_estimators=False)
    assert home_warnings(tiny, tiny_plan, hub_repos(tiny, tiny_plan), None, str(tmp_path / ".cache/hf")) == []


def test_the_results_root_links_results_and_refuses_a_results_that_is_elsewhere(tmp_path):
    from pipeline_lib.plan.site import link_results_root

    work = tmp_path / "checkout"
    work.mkdir()
    assert link_results_root({"site": {}}, work) is None and not (work / "results").exists()
    root = tmp_path / "shared" / "results"
    assert link_results_root({"site": {"results_root": str(root)}}, work) == root
    assert (work / "results").is_symlink() and (work / "results").resolve() == root.resolve()
    assert link_results_root({"site": {"results_root": str(root)}}, work) == root  # again: nothing to do
    with pytest.raises(ValueError, match=r"site.results_root is .*other.*ln -s"):
        link_results_root({"site": {"results_root": str(tmp_path / "other")}}, work)


def test_alpaca_evals_instructions_are_read_offline_from_the_fetched_repository(tmp_path):
    """AlpacaEval's instructions come from the fetched tatsu-lab/alpaca_eval (the plan names the file in the spec,
    as config/paper.yaml no longer asks for a file saved by hand): an offline job reads them from HF_HOME alone."""
    from pipeline_lib.paper.steps import eval_params
    from pipeline_lib.plan.hub import ALPACA_EVAL_INSTRUCTIONS, ALPACA_EVAL_REPO
    from pipeline_lib.plan.table import load_config

    spec = json.loads(eval_params(load_config([REPO / "config/paper.yaml"]), "alpaca_eval")["spec"])
    assert spec["instructions"] is None
    assert spec["instructions_hub"] == {"repo": ALPACA_EVAL_REPO, "file": ALPACA_EVAL_INSTRUCTIONS}
    rows = [{"instruction": "Say hi.", "dataset": "helpful_base"}, {"instruction": "Count to 3.", "dataset": "oasst"}]
    repos = {("dataset", ALPACA_EVAL_REPO): Repo({ALPACA_EVAL_INSTRUCTIONS: json.dumps(rows).encode()})}
    with HubServer(repos) as hub:
        result = run_fetch(tmp_path, hub, [HubRepo("dataset", ALPACA_EVAL_REPO, why="eval.transfer.alpaca_eval")])
    assert result.returncode == 0, result.stderr[-3000:]
    offline = {key: value for key, value in repo_env().items() if not key.startswith("HF_")}
    offline |= {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    script = ("import json, sys, pandas as pd\nfrom pipeline_lib.jobs.eval.harness import instructions_file\n"
              "print(list(pd.read_json(instructions_file(json.loads(sys.argv[1])))['instruction']))\n")
    job = subprocess.run([sys.executable, "-c", script, json.dumps(spec)], capture_output=True, text=True,
                         timeout=300, env=offline)
    assert job.returncode == 0, job.stderr[-3000:]
    assert job.stdout.strip() == "['Say hi.', 'Count to 3.']"
