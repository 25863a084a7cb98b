"""`gpu_canary`: one short job on one GPU node that every GPU job of the plan waits for, so a broken node, driver,
cache or disk fails in minutes instead of after the first GPU hours.

Each check returns a :class:`Check`; a failed one carries one sentence naming the fix. The checks read recorded
outputs (``nvidia-smi``'s text, ``os.statvfs`` numbers, the hub cache folder), so each is unit-tested on CPU from
fixtures (tests/jobs/test_site.py); every subprocess has a timeout. On a machine without a GPU the job says "no GPU"
and exits non-zero, after the cache and disk checks, so a site learns everything at once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.env import env
from pipeline_lib.core.io import write_json
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.jobs.envlock import LockError, min_driver_for_cuda
from pipeline_lib.plan.hub import HubRepo, load_repos

__all__ = ["Check", "Quota", "check_cache", "check_disk", "check_driver", "check_gpus", "check_nccl",
           "check_nccl_nodes", "check_vllm", "main", "nodes_command", "parse_nvidia_smi", "parse_quota", "read_quota",
           "run_checks", "slurm_task"]

#: Seconds each subprocess of a check may take (the job is meant to finish in minutes).
TIMEOUTS = {"nvidia-smi": 30, "nccl": 180, "vllm": 600}


@dataclass(frozen=True)
class Check:
    """One check's verdict: ``detail`` says what was measured, ``fix`` (when it failed) what to do."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    warn: bool = False  # passed, with numbers to read (the disk check when unsure)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def parse_nvidia_smi(text: str) -> tuple[str, str]:
    """(driver version, the newest CUDA the driver supports) from ``nvidia-smi``'s header line
    ``| NVIDIA-SMI 535.129.03  Driver Version: 535.129.03  CUDA Version: 12.2 |``."""
    driver = re.search(r"Driver Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text)
    if not driver or not cuda:
        raise ValueError("nvidia-smi output has no 'Driver Version: ... CUDA Version: ...' header")
    return driver.group(1), cuda.group(1)


def check_driver(smi_text: str, torch_cuda: str | None,
                 min_driver: Callable[[str], int] = min_driver_for_cuda) -> Check:
    """The node's driver against the CUDA the env's torch was built for (``torch.version.cuda``); ``min_driver``
    maps a CUDA release to the oldest driver branch that runs it (envlock's table)."""
    if torch_cuda is None:
        return Check("driver", False, "torch.version.cuda is None: the env has a CPU build of torch",
                     "Deploy the job's locked GPU env (envs/train-verl.yaml; the Slurm profile's conda deployment).")
    try:
        driver, driver_cuda = parse_nvidia_smi(smi_text)
    except ValueError as error:
        return Check("driver", False, str(error), "Run the canary on a GPU node whose nvidia-smi works.")
    try:
        need = min_driver(torch_cuda)
    except LockError as error:
        return Check("driver", False, str(error), "Add the CUDA release to envlock.CUDA_MIN_DRIVER.")
    detail = (f"driver {driver} (supports CUDA {driver_cuda}); the env's torch is built for CUDA {torch_cuda}, "
              f"which needs driver >= {need}")
    if _version(driver)[0] < need:
        return Check("driver", False, detail,
                     f"Ask for nodes with an NVIDIA driver >= {need}, or relock the GPU envs against CUDA "
                     f"{driver_cuda} wheels (an index line in each env's input, docs/usage.md).")
    return Check("driver", True, detail)


def check_gpus(torch_count: int, smi_list: str) -> Check:
    """torch sees every GPU ``nvidia-smi -L`` lists (a CUDA_VISIBLE_DEVICES or cgroup mismatch hides some)."""
    listed = len(re.findall(r"^GPU \d+:", smi_list, re.M))
    detail = f"torch sees {torch_count} GPU(s); nvidia-smi -L lists {listed}"
    if torch_count == 0 or torch_count != listed:
        return Check("gpus", False, detail, "Check the job's --gpus/--gres request and CUDA_VISIBLE_DEVICES: torch "
                                            "must see every GPU Slurm gave the job.")
    return Check("gpus", True, detail)


def _allreduce(rank: int, world: int, init_method: str, backend: str, device_index: int) -> None:
    """One rank of the canary's all-reduce: 4 MB of ``rank + 1`` summed over ``world`` ranks, checked."""
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world)
    device = torch.device("cuda", device_index) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    value = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(value)
    expected = world * (world + 1) / 2
    if not bool((value == expected).all()):
        raise RuntimeError(f"rank {rank}: all_reduce gave {value[0].item()}, expected {expected}")
    dist.destroy_process_group()


def _nccl_worker(rank: int, world: int, port: int, backend: str) -> None:
    _allreduce(rank, world, f"tcp://127.0.0.1:{port}", backend, rank)


def slurm_task() -> tuple[int, int, int]:
    """(rank, world, local device) of this ``srun`` task, from Slurm's task variables."""
    values = {name: env(name) for name in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")}
    missing = [name for name, value in values.items() if value is None]
    if missing:
        raise RuntimeError(f"not an srun task: {', '.join(missing)} unset")
    return int(values["SLURM_PROCID"]), int(values["SLURM_NTASKS"]), int(values["SLURM_LOCALID"])


def nodes_command(nodes: int, gpus_per_node: int, master: str, port: int, backend: str = "nccl") -> list[str]:
    """The ``srun`` line that runs one all-reduce rank per GPU on every node of the canary's allocation, meeting at
    ``master:port`` (the node the canary runs on): the interconnect the 2-node verl jobs train over."""
    return ["srun", f"--nodes={nodes}", f"--ntasks-per-node={gpus_per_node}", f"--ntasks={nodes * gpus_per_node}",
            "--kill-on-bad-exit=1", sys.executable, "-m", "pipeline_lib.jobs.canary", "allreduce-task",
            "--master", master, "--port", str(port), "--backend", backend]


def check_nccl_nodes(nodes: int, gpus_per_node: int, backend: str = "nccl", timeout: float = TIMEOUTS["nccl"],
                     runner: Callable[..., Any] = subprocess.run) -> Check:
    """An all-reduce across ``nodes`` nodes (:func:`nodes_command`), bounded by ``timeout``."""
    import socket

    master = socket.gethostname()
    command = nodes_command(nodes, gpus_per_node, master, _free_port(), backend)
    what = f"{backend} all_reduce over {nodes} nodes x {gpus_per_node} GPUs"
    if shutil.which(command[0]) is None and runner is subprocess.run:
        return Check("nccl_nodes", False, f"{what}: srun is not on PATH",
                     "Run gpu_canary as a Slurm job (the Slurm profile) on an allocation of that many nodes.")
    try:
        done = runner(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Check("nccl_nodes", False, f"{what} hung past {timeout:.0f} s",
                     "Check the inter-node fabric (NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME / NCCL_IB_HCA for the "
                     "right interface) before any 2-node job waits out NCCL's timeout.")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return Check("nccl_nodes", False, f"{what} failed: {' | '.join(tail)}",
                     "Rerun with NCCL_DEBUG=INFO; set NCCL_SOCKET_IFNAME / NCCL_IB_HCA to the fabric's interface.")
    return Check("nccl_nodes", True, f"{what}: correct sums")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_nccl(world: int, backend: str = "nccl", timeout: float = TIMEOUTS["nccl"]) -> Check:
    """An all-reduce of 4 MB across ``world`` processes, one per GPU, in a subprocess bounded by ``timeout``
    (``backend`` gloo runs the same code on CPU in the tests)."""
    command = [sys.executable, "-m", "pipeline_lib.jobs.canary", "allreduce", "--world", str(world),
               "--backend", backend]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Check("nccl", False, f"{backend} all_reduce over {world} processes hung past {timeout:.0f} s",
                     "Set NCCL_DEBUG=INFO and check the node's NVLink/PCIe peer access (nvidia-smi topo -m); "
                     "NCCL_P2P_DISABLE=1 tells a P2P fault from others.")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return Check("nccl", False, f"{backend} all_reduce over {world} processes failed: {' | '.join(tail)}",
                     "Rerun with NCCL_DEBUG=INFO; a version error means the env's NCCL does not match the driver.")
    return Check("nccl", True, f"{backend} all_reduce over {world} processes: correct sums")


def _snapshot(repo: HubRepo, hub_cache: Path) -> Path | None:
    """The cached snapshot folder of ``repo`` (its ref, or its pinned commit), or None."""
    folder = hub_cache / f"{repo.repo_type}s--{repo.repo_id.replace('/', '--')}"
    revision = repo.revision or "main"
    ref = folder / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    snapshot = folder / "snapshots" / commit
    return snapshot if snapshot.is_dir() and any(snapshot.iterdir()) else None


def check_cache(repos: Sequence[HubRepo], hf_home: Path) -> Check:
    """Every model and dataset the plan reads is in the hub cache (``<hf_home>/hub``), datasets also prepared
    (``<hf_home>/datasets``): the jobs run with HF_HUB_OFFLINE=1."""
    missing = []
    for repo in repos:
        if _snapshot(repo, hf_home / "hub") is None:
            missing.append(f"{repo.repo_type} {repo.repo_id} ({repo.why})")
        elif repo.repo_type == "dataset":
            prepared = hf_home / "datasets" / repo.repo_id.replace("/", "___")
            if not prepared.is_dir():
                missing.append(f"dataset {repo.repo_id} (downloaded but not prepared by datasets)")
    if missing:
        return Check("cache", False, f"{len(missing)} of {len(repos)} missing from {hf_home}: " + "; ".join(missing),
                     "Run `snakemake fetch --configfile config/paper.yaml` on the submit host (with HF_TOKEN for "
                     "gated repositories), with site.hf_home on a filesystem the nodes mount.")
    return Check("cache", True, f"{len(repos)} repositories in {hf_home}")


def _statvfs(root: str) -> os.statvfs_result:
    """``os.statvfs`` of ``root``, or of its nearest existing parent (a results root not made yet)."""
    path = Path(root)
    while not path.exists() and path != path.parent:
        path = path.parent
    return os.statvfs(path)


@dataclass(frozen=True)
class Quota:
    """A user's quota on one filesystem, in GB: ``used`` against ``limit`` (the hard limit, else the soft one)."""

    tool: str
    used_gb: float
    limit_gb: float | None  # None: no limit set

    @property
    def room_gb(self) -> float | None:
        return None if self.limit_gb is None else max(0.0, self.limit_gb - self.used_gb)


def _kbytes(field: str) -> float:
    """A quota tool's KiB column (``*`` marks one over its soft limit) in GB."""
    return float(field.rstrip("*")) * 1024 / 1e9


def parse_quota(text: str, tool: str) -> Quota | None:
    """The block quota of the first filesystem row of ``lfs quota -u USER PATH`` or ``quota -u -w -f MOUNT`` (both:
    ``Filesystem used quota limit grace files ...`` in KiB; a long filesystem name may sit alone on its own line);
    None when the output holds no such row (no quota there)."""
    lines = text.splitlines()
    header = next((n for n, line in enumerate(lines) if re.match(r"\s*Filesystem\s", line)), None)
    if header is None:
        return None
    rows = [line.split() for line in lines[header + 1:] if line.strip()]
    fields: list[str] = []
    for row in rows:
        fields += row
        if len(fields) >= 4:
            break
    if len(fields) < 4 or not re.fullmatch(r"\d+\*?", fields[1]):
        return None
    used, soft, hard = (_kbytes(fields[i]) for i in (1, 2, 3))
    limit = hard if hard > 0 else soft if soft > 0 else None
    return Quota(tool, used, limit)


#: Filesystem types whose free space says nothing of a user's quota (a parallel or network filesystem).
QUOTA_FILESYSTEMS = ("lustre", "gpfs", "beegfs", "nfs", "nfs4", "cephfs", "fuse.ceph", "wekafs", "xfs")


def _mount(root: str) -> tuple[str, str]:
    """(mount point, filesystem type) of ``root`` (its nearest existing parent), from /proc/mounts."""
    path = Path(root).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    best, kind = "/", "unknown"
    mounts = Path("/proc/mounts").read_text().splitlines() if Path("/proc/mounts").is_file() else []
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and (path == Path(parts[1]) or Path(parts[1]) in path.parents) \
                and len(parts[1]) >= len(best):
            best, kind = parts[1], parts[2]
    return best, kind


def read_quota(root: str, run: Callable[[list[str]], str | None] | None = None) -> tuple[Quota | None, str]:
    """The user's quota where ``root`` lives (``lfs quota`` on Lustre, else ``quota``), and what was tried."""
    run = run or (lambda command: _run(command, any_status=True))  # quota exits 1 for a user over quota
    mount, kind = _mount(root)
    user = env("USER") or str(os.getuid())
    tried = []
    commands = ([["lfs", "quota", "-u", user, mount]] if kind == "lustre" else []) + \
        [["quota", "-u", "-w", "-f", mount]]
    for command in commands:
        tried.append(command[0])
        text = run(command)
        if text:
            quota = parse_quota(text, command[0])
            if quota is not None:
                return quota, f"{command[0]} on {mount} ({kind})"
    return None, f"{mount} ({kind}): no quota from {' or '.join(tried)}"


def check_disk(needs_gb: Mapping[str, Mapping[str, float]], statvfs: Callable[[str], Any] = _statvfs,
               quota: Callable[[str], tuple[Quota | None, str]] = read_quota,
               filesystem: Callable[[str], str] = lambda root: _mount(root)[1]) -> Check:
    """Room under each root (results, scratch: the filesystem's free space, or the user's quota room where smaller)
    against the plan's needs (:func:`pipeline_lib.plan.site.site_disk_needs`): ``one`` (the largest job) must fit,
    else the check fails, since the next job cannot; less room than ``at_once`` (what can run at once under the
    profile's ``jobs``, and the results the plan keeps) is a warning with the numbers, as is a network filesystem
    whose quota cannot be read. Roots on one filesystem share its room, so their needs are summed."""
    by_fs: dict[Any, dict[str, Any]] = {}
    for root, need in needs_gb.items():
        stats = statvfs(root)
        free_gb = stats.f_bavail * stats.f_frsize / 1e9
        key = getattr(stats, "f_fsid", None) or root
        entry = by_fs.setdefault(key, {"roots": [], "one": 0.0, "at_once": 0.0, "jobs": 0.0, "free": free_gb,
                                       "root": root})
        entry["roots"].append(root)
        entry["one"] += need["one"]
        entry["at_once"] += need["at_once"]
        entry["jobs"] = max(entry["jobs"], need.get("jobs", 0.0))
    failed, warned, details = [], [], []
    for entry in by_fs.values():
        roots = " + ".join(entry["roots"])
        found, how = quota(entry["root"])
        room = entry["free"] if found is None or found.room_gb is None else min(entry["free"], found.room_gb)
        numbers = (f"{roots}: {room:.0f} GB of room ({entry['free']:.0f} GB free"
                   + (f", quota {found.used_gb:.0f} of {found.limit_gb:.0f} GB used by {found.tool})"
                      if found is not None and found.limit_gb is not None else f"; {how})")
                   + f"; the largest job needs {entry['one']:.0f} GB, up to {entry['jobs']:.0f} at once and the "
                   f"kept results {entry['at_once']:.0f} GB")
        details.append(numbers)
        if room < entry["one"]:
            failed.append(numbers)
        elif room < entry["at_once"]:
            warned.append(numbers)
        elif found is None and filesystem(entry["root"]) in QUOTA_FILESYSTEMS:
            warned.append(f"{numbers} (a {filesystem(entry['root'])} filesystem whose quota could not be read: the "
                          "room may be smaller)")
    if failed:
        return Check("disk", False, "; ".join(failed),
                     "Point site.scratch_root (and the results directory) at a filesystem with room for the largest "
                     "job, or free space there, before the run.")
    if warned:
        return Check("disk", True, "; ".join(warned), warn=True,
                     fix="Lower the profile's `jobs` (fewer runs at once), or free space or raise the quota, before "
                         "the later jobs fill it.")
    return Check("disk", True, "; ".join(details) or "no roots to check")


_VLLM_SCRIPT = """
import sys
from vllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], max_model_len=256, gpu_memory_utilization=0.3, enforce_eager=True)
out = llm.generate(["The capital of France is"], SamplingParams(max_tokens=8, temperature=0.0))
text = out[0].outputs[0].text
assert out[0].outputs[0].token_ids, "no tokens generated"
print("GENERATED", repr(text))
"""


def check_vllm(model: str, hf_home: Path, timeout: float = TIMEOUTS["vllm"]) -> Check:
    """vLLM generates a few tokens from the base model out of the cache with the hub offline."""
    env = os.environ | {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", _VLLM_SCRIPT, model], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return Check("vllm", False, f"vLLM did not generate from {model} within {timeout:.0f} s",
                     "Read the job log: a slow shared filesystem for site.hf_home or a hung CUDA graph capture.")
    generated = [line for line in done.stdout.splitlines() if line.startswith("GENERATED")]
    if done.returncode != 0 or not generated:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return Check("vllm", False, f"vLLM on {model} failed: {' | '.join(tail)}",
                     "Run `snakemake fetch` (the model must be in site.hf_home) and check the env's vLLM build "
                     "matches its torch and the driver.")
    return Check("vllm", True, f"{model}: {generated[0].removeprefix('GENERATED ')}")


def _run(command: list[str], timeout: float = TIMEOUTS["nvidia-smi"], any_status: bool = False) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return done.stdout if done.returncode == 0 or any_status else None


def run_checks(repos: Sequence[HubRepo], hf_home: Path, needs_gb: Mapping[str, Mapping[str, float]],
               model: str | None, nodes: int = 1) -> list[Check]:
    """Every check, cheapest first; the GPU checks only where a GPU is found ("no GPU" otherwise); the all-reduce
    across ``nodes`` nodes where the plan has multi-node jobs."""
    checks = [check_cache(repos, hf_home), check_disk(needs_gb)]
    smi = _run(["nvidia-smi"])
    import torch

    if smi is None or not torch.cuda.is_available():
        why = "nvidia-smi is missing or failed" if smi is None else "torch.cuda.is_available() is False"
        return [*checks, Check("gpu", False, f"no GPU: {why}",
                               "Run gpu_canary on a GPU node (the Slurm profile's gpu_canary resources).")]
    checks.append(check_driver(smi, torch.version.cuda))
    checks.append(check_gpus(torch.cuda.device_count(), _run(["nvidia-smi", "-L"]) or ""))
    if all(check.ok for check in checks[-2:]):
        checks.append(check_nccl(torch.cuda.device_count()))
        if nodes > 1 and checks[-1].ok:
            checks.append(check_nccl_nodes(nodes, torch.cuda.device_count()))
        if model and checks[0].ok:
            checks.append(check_vllm(model, hf_home))
    return checks


def main(argv: Sequence[str] | None = None) -> int:
    parser = entry_parser(__doc__, summary="line", logs=False)
    sub = parser.add_subparsers(dest="command")
    worker = sub.add_parser("allreduce", help="(internal) the all-reduce of check_nccl")
    worker.add_argument("--world", type=int, required=True)
    worker.add_argument("--backend", default="nccl")
    task = sub.add_parser("allreduce-task", help="(internal) one srun task of check_nccl_nodes")
    task.add_argument("--master", required=True)
    task.add_argument("--port", type=int, required=True)
    task.add_argument("--backend", default="nccl")
    vllm = sub.add_parser("vllm", help="start vLLM briefly in this job's env (the eval and judge envs' canaries)")
    vllm.add_argument("--model", required=True)
    vllm.add_argument("--hf-home", required=True)
    vllm.add_argument("--env", required=True, help="the env's name, for the report")
    vllm.add_argument("--out", required=True)
    parser.add_argument("--repos", help="JSON list of the plan's hub repositories (pipeline_lib.plan.hub)")
    parser.add_argument("--hf-home", help="the hub cache (site.hf_home)")
    parser.add_argument("--disk", help="JSON {root: GB the plan writes there}")
    parser.add_argument("--model", help="the base model vLLM generates from")
    parser.add_argument("--out", help="the report (JSON)")
    parser.add_argument("--nodes", type=int, default=1, help="nodes of the allocation: >1 checks NCCL across them")
    args = parser.parse_args(argv)
    if args.command == "allreduce":
        import torch.multiprocessing as mp

        mp.spawn(_nccl_worker, args=(args.world, _free_port(), args.backend), nprocs=args.world, join=True)
        return 0
    if args.command == "allreduce-task":
        rank, world, local = slurm_task()
        _allreduce(rank, world, f"tcp://{args.master}:{args.port}", args.backend, local)
        return 0
    if args.command == "vllm":
        return _report([check_vllm(args.model, Path(args.hf_home))], args.out, time.time(), inputs=[],
                       params={"model": args.model, "env": args.env}, step=f"gpu_canary_vllm_{args.env}")
    if not (args.repos and args.hf_home and args.disk and args.out):
        parser.error("--repos, --hf-home, --disk and --out are required")
    started = time.time()
    checks = run_checks(load_repos(args.repos), Path(args.hf_home), json.loads(Path(args.disk).read_text()),
                        args.model, nodes=args.nodes)
    return _report(checks, args.out, started, inputs=[args.repos, args.disk], params={"model": args.model},
                   step="gpu_canary")


def _report(checks: Sequence[Check], out: str, started: float, inputs: Sequence[str], params: Mapping[str, Any],
            step: str) -> int:
    """Print each check; write the report (only for a node that passed: the failed one is in the log)."""
    for check in checks:
        mark = "FAIL" if not check.ok else "WARN" if check.warn else "ok  "
        print(f"{mark} {check.name}: {check.detail}" + (f"\n     fix: {check.fix}" if mark != "ok  " else ""),
              file=sys.stderr)
    ok = all(check.ok for check in checks)
    report = {"ok": ok, "node": os.uname().nodename, "seconds": round(time.time() - started, 1),
              "checks": [asdict(check) for check in checks]}
    if not ok:
        print(json.dumps(report, indent=2), file=sys.stderr)
        return 1
    write_json(out, report)
    write_provenance([out], step=step, inputs=list(inputs), params=dict(params))
    return 0


if __name__ == "__main__":
    sys.exit(main())
