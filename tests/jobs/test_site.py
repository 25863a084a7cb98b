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


def run_fetch(tmp_path: Path, hub: HubServer, repos: list[HubRepo], token: str | None = None):
    """``python -m pipeline_lib.jobs.fetch`` as the local rule runs it, against the hub on 127.0.0.1."""
    (tmp_path / "repos.json").write_text(repos_json(repos))
    env = {key: value for key, value in repo_env().items() if not key.startswith("HF_")}
    env |= {"HF_ENDPOINT": hub.url, **({"HF_TOKEN": token} if token else {})}
    return subprocess.run([sys.executable, "-m", "pipeline_lib.jobs.fetch", "--repos", str(tmp_path / "repos.json"),
                           "--hf-home", str(tmp_path / "hf"), "--out", str(tmp_path / "fetch.json")],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


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

def _jobs(dry_run: str) -> list[dict[str, str]]:
    """Each job block of a full-console dry run: rule, input and resources lines."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", dry_run):
        name = re.match(r"(?:local)?rule (\w+):\n", block)
        if name:
            fields = dict(re.findall(r"^    (input|resources): (.*)$", block, re.M))
            jobs.append({"rule": name.group(1), **fields})
    return jobs


def _asks_gpu(resources: str) -> bool:
    return bool(re.search(r"\bgres=[^,]*gpu:\d", resources) or re.search(r"\bgpus?=[1-9]", resources))


def _is_local(workdir: Path, rule: str, configfile: str) -> bool:
    script = ("import sys\nfrom pathlib import Path\nfrom snakemake.api import SnakemakeApi\n"
              "from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings\n"
              "with SnakemakeApi(OutputSettings(quiet=True)) as api:\n"
              "    flow = api.workflow(resource_settings=ResourceSettings(), snakefile=Path('Snakefile'),\n"
              "        config_settings=ConfigSettings(configfiles=[Path(sys.argv[1])]), workdir=Path('.'))\n"
              "    print(flow._workflow.is_local(flow._workflow.get_rule(sys.argv[2])))\n")
    result = subprocess.run([sys.executable, "-c", script, configfile, rule], cwd=workdir, capture_output=True,
                            text=True, timeout=600, env=repo_env())
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1] == "True"


def test_the_paper_plan_runs_the_canary_before_every_gpu_job_and_fetches_every_hub_id(workflow_copy):
    result = snakemake(workflow_copy, "-n", "-p", "--profile", "profiles/slurm", "--configfile", "config/paper.yaml",
                       *NO_CONDA, full_console=True)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = _jobs(result.stdout)
    gpu_jobs = [job for job in jobs if _asks_gpu(job.get("resources", "")) and not job["rule"].startswith("gpu_canary")]
    assert {job["rule"] for job in gpu_jobs} >= {"train_verl", "train_trl", "annotate_rationales", "train_imagenet",
                                                 "eval_checkpoint", "eval_lm_eval", "eval_alpaca_eval",
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
    assert re.search(r"SOFTMAXGRPO_ATTEMPT=1 \S+ -m pipeline_lib.jobs.engines.verl.train", result.stdout)
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
    assert "+ offline_exports(config)" in (workflow_copy / "workflow/rules/common.smk").read_text()
