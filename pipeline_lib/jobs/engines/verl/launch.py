"""Run a command on a Ray cluster spanning the nodes of the current Slurm allocation.

    python -m pipeline_lib.jobs.engines.verl.launch [--gpus-per-node N] [--ray-port P] -- <command...>

Inside a Slurm allocation of N > 1 nodes this starts a Ray head on the node it runs on and one
Ray worker on every other node (one ``srun --overlap`` step), waits until all N nodes (and, with
``--gpus-per-node G``, N x G GPUs as Ray detects them on each node) have joined, runs the command
with ``RAY_ADDRESS`` set, stops Ray and exits with the command's status. With one node, or outside
Slurm, it only runs the command: verl then starts its own local Ray.

Why it looks the way it does:
- The Snakemake Slurm executor runs each job as ``srun -n1 ...`` after stripping every
  ``SLURM_*`` variable except the job id, so the node list is read from ``scontrol``, never from
  ``SLURM_JOB_NODELIST``; the worker step gets a clean environment so it does not inherit the
  first step's task geometry.
- Ray >= 2.52 turns token authentication on whenever ``~/.ray/auth_token`` exists (any earlier local
  ``ray.init`` writes one), so whether a worker may join would depend on the home directory. The
  launcher decides instead: a fresh token per job, passed to head, workers and the command through
  ``RAY_AUTH_MODE=token`` / ``RAY_AUTH_TOKEN`` in their environments (never on a command line).
- Each node's Ray gets the job's CPUs and GPUs per node, as verl's ``examples/slurm/ray_on_slurm.slurm``
  does: the worker step asks Slurm for them (``--cpus-per-task``, ``--gres``) and ``ray start`` declares both
  (``--num-cpus``, ``--num-gpus``), read from ``scontrol show job`` (``--declare-gpus``: the GPUs each step sees).
  Where a site binds tasks to cores, a step that asks for nothing gets one core, which the node's Ray, FSDP and
  vLLM would then share.
- Every Ray port is picked free on its own node, so two "nodes" sharing one host (the CI
  cluster's virtual nodes) never collide, and nothing is killed by name: ``ray stop`` would kill
  every Ray on the host, so each ``ray start --block`` is stopped through its own PID instead.
- Ray gives a starting node a fixed 30 s to register with its GCS. On a loaded host a head or worker can miss
  it and exit 1 with nothing wrong; the launcher then stops what it started and brings the cluster up again,
  on fresh ports (``--start-attempts``, 3 by default). Nothing has run yet, so a second start loses nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.env import env

__all__ = ["RayStartError", "allocation_nodes", "allocation_per_node", "bring_up", "main", "node_address",
           "node_gpus", "per_node_resources", "ray_start_command", "slurm_step_gpus", "wait_for_cluster"]

_MODULE = "pipeline_lib.jobs.engines.verl.launch"
_KEEP_SLURM = {"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CONF", "SLURM_CLUSTER_NAME"}
_PORT_OPTIONS = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                 "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port")


def log(message: str) -> None:
    print(f"[launch {socket.gethostname()}:{os.getpid()}] {message}", file=sys.stderr, flush=True)


def _scontrol(*args: str) -> str:
    result = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"`scontrol {' '.join(args)}` failed: {result.stderr.strip()}")
    return result.stdout


def _fields(scontrol_output: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in scontrol_output.split() if "=" in item)


def allocation_nodes(job_id: str | None = None) -> list[str]:
    """Host names of the Slurm allocation this process runs in ([] outside Slurm)."""
    job_id = job_id or env("SLURM_JOB_ID")
    if not job_id:
        return []
    nodelist = _fields(_scontrol("show", "job", "--oneliner", job_id)).get("NodeList", "")
    if not nodelist or nodelist == "(null)":
        raise RuntimeError(f"Slurm job {job_id} has no node list yet")
    return _scontrol("show", "hostnames", nodelist).split()


def allocation_per_node(job_id: str | None = None) -> dict[str, int]:
    """The CPUs and GPUs per node of the Slurm allocation (``{}`` outside Slurm), from ``scontrol show job``."""
    job_id = job_id or env("SLURM_JOB_ID")
    if not job_id:
        return {}
    return per_node_resources(_fields(_scontrol("show", "job", "--oneliner", job_id)))


def per_node_resources(fields: Mapping[str, str]) -> dict[str, int]:
    """CPUs and GPUs per node from ``scontrol show job`` fields (NumCPUs / NumNodes; TresPerNode, else AllocTRES)."""
    nodes = int(fields.get("NumNodes", "1").split("-")[0])
    resources = {"cpus": max(1, int(fields["NumCPUs"]) // nodes)} if fields.get("NumCPUs", "").isdigit() else {}
    per_node = re.search(r"gres[/:]gpu(?::[^:=,\s]+)?[:=](\d+)", fields.get("TresPerNode", ""))
    total = re.search(r"gres/gpu=(\d+)", fields.get("AllocTRES", "") or fields.get("TRES", ""))
    if per_node:
        resources["gpus"] = int(per_node.group(1))
    elif total:
        resources["gpus"] = int(total.group(1)) // nodes
    return resources


def node_address(node: str) -> str:
    """The IP other nodes reach ``node`` at: its Slurm NodeAddr, resolved."""
    address = _fields(_scontrol("show", "node", "--oneliner", node)).get("NodeAddr", node)
    return socket.gethostbyname(address)


def current_node(nodes: Sequence[str]) -> str:
    """The allocation node this process runs on (slurmd's name; virtual nodes share a hostname)."""
    name = env("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if name not in nodes:
        raise RuntimeError(f"this process runs on {name!r}, which is not in the allocation {nodes}")
    return name


def free_ports(count: int) -> list[int]:
    """Ports free on this host right now (held open together, so they are distinct)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("", 0))
        return [sock.getsockname()[1] for sock in sockets]


def slurm_step_gpus() -> int:
    """GPUs Slurm gave this step on this node (its CUDA_VISIBLE_DEVICES), for ``--declare-gpus``."""
    visible = (env("CUDA_VISIBLE_DEVICES") or "").strip()
    return len([device for device in visible.split(",") if device.strip()]) if visible else 0


def ray_start_command(ip: str, *, head_port: int | None, join: str | None, gpus: int | None,
                      cpus: int | None, object_store_mb: int | None, temp_dir: Path) -> list[str]:
    """``ray start --block`` for one node, with every port chosen free on this host.

    ``gpus=None`` lets Ray detect the node's GPUs (capped by the CUDA_VISIBLE_DEVICES Slurm set);
    a number declares them instead.
    """
    ports = free_ports(len(_PORT_OPTIONS) + 1)
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", "--disable-usage-stats",
               f"--node-ip-address={ip}", f"--temp-dir={temp_dir}"]
    command += [f"{option}={port}" for option, port in zip(_PORT_OPTIONS, ports[:-1], strict=True)]
    if join is None:
        command += ["--head", f"--port={head_port}", "--include-dashboard=false",
                    f"--ray-client-server-port={ports[-1]}"]
    else:
        command += [f"--address={join}"]
    if gpus is not None:
        command.append(f"--num-gpus={gpus}")
    if cpus is not None:
        command.append(f"--num-cpus={cpus}")
    if object_store_mb is not None:
        command.append(f"--object-store-memory={object_store_mb * 1024 * 1024}")
    return command


def wait_for_cluster(address: str, nodes: int, gpus: int, timeout: float,
                     still_starting: Callable[[], None] = lambda: None) -> dict[str, float]:
    """Block until ``nodes`` alive Ray nodes with >= ``gpus`` GPUs in total have joined.

    Fails at once when all nodes are in but GPUs are missing (a node's GPUs never change later).
    ``still_starting`` is called between polls and raises if a process that should bring a node
    up has already died, so a broken worker fails the launch at once instead of at the timeout.
    """
    import ray

    deadline = time.monotonic() + timeout
    while True:
        still_starting()
        try:
            ray.init(address=address, logging_level="WARNING", log_to_driver=False)
            break
        except (ConnectionError, RuntimeError) as error:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no Ray head at {address} after {timeout:.0f} s: {error}") from error
            time.sleep(2)
    try:
        while True:
            alive = [node for node in ray.nodes() if node["Alive"]]
            total_gpus = sum(node["Resources"].get("GPU", 0) for node in alive)
            if len(alive) >= nodes and total_gpus >= gpus:
                return {"nodes": len(alive), "gpus": total_gpus,
                        "cpus": sum(node["Resources"].get("CPU", 0) for node in alive)}
            if len(alive) >= nodes:
                # a node's GPUs are fixed when it registers: once all are in, waiting cannot help
                per_node = [node["Resources"].get("GPU", 0) for node in alive]
                raise RuntimeError(f"all {len(alive)} Ray nodes joined but they have {total_gpus}/{gpus} GPUs "
                                   f"(per node: {per_node}); check the job's gres and CUDA_VISIBLE_DEVICES")
            still_starting()
            if time.monotonic() > deadline:
                raise TimeoutError(f"after {timeout:.0f} s only {len(alive)}/{nodes} Ray nodes and "
                                   f"{total_gpus}/{gpus} GPUs joined the cluster at {address}")
            time.sleep(1)
    finally:
        ray.shutdown()


def _worker_env() -> dict[str, str]:
    """The environment for the worker step: allocation identity only, no inherited step geometry."""
    return {key: value for key, value in os.environ.items()
            if not (key.startswith(("SLURM_", "SRUN_", "SBATCH_")) and key not in _KEEP_SLURM)}


def _without(env: dict[str, str], *keys: str) -> dict[str, str]:
    return {key: value for key, value in env.items() if key not in keys}


def _stop(process: subprocess.Popen, what: str, grace: float = 30) -> None:
    """SIGTERM one process we started (ray start --block cleans up its node), SIGKILL its group if stuck."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    log(f"stopped {what} (pid {process.pid})")


@contextlib.contextmanager
def _terminate_on_sigterm() -> Iterator[None]:
    """scancel/timeouts send SIGTERM: turn it into an exception so Ray is stopped on the way out."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class RayStartError(RuntimeError):
    """A ``ray start`` we launched died before the cluster was up (retryable: nothing ran yet)."""


def _require_running(processes: Sequence[tuple[subprocess.Popen, str]]) -> None:
    """Raise :class:`RayStartError` if a process that holds up the cluster has exited."""
    for process, what in processes:
        if process.poll() is not None:
            raise RayStartError(f"{what} exited with status {process.returncode} before the command ran")


def bring_up(start: Callable[[], list[tuple[subprocess.Popen, str]]],
             wait: Callable[[Callable[[], None]], dict[str, float]], attempts: int,
             stop: Callable[[subprocess.Popen, str], None]) -> tuple[list[tuple[subprocess.Popen, str]], dict]:
    """Start the cluster's processes and wait for them, starting again when one dies during start-up.

    Ray gives a starting node a fixed 30 s to register with the GCS; on a loaded host a head or worker
    can miss it and exit 1 though nothing is wrong with the allocation. Such a start is retried (fresh
    ports each time) up to ``attempts`` times; a timeout or missing GPUs is never retried.
    Returns the running processes (the caller stops them) and what joined.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    for attempt in range(1, attempts + 1):
        processes = start()
        try:
            return processes, wait(lambda processes=processes: _require_running(processes))
        except BaseException as error:
            for process, what in reversed(processes):
                stop(process, what)
            if not isinstance(error, RayStartError):
                raise
            if attempt == attempts:
                raise RayStartError(f"{error} (start attempt {attempt} of {attempts})") from error
            log(f"start attempt {attempt} of {attempts} failed: {error}; starting the cluster again")
    raise AssertionError("unreachable: the last attempt returns or raises")


def run_cluster(command: Sequence[str], nodes: list[str], args: argparse.Namespace) -> int:
    """Head here, workers elsewhere, the command with RAY_ADDRESS, then Ray down; the command's status."""
    head = current_node(nodes)
    workers = [node for node in nodes if node != head]
    ip = node_address(head)
    job = env("SLURM_JOB_ID") or "nojob"
    temp_root = Path(args.temp_root)
    ray_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    per_node = allocation_per_node(job)
    gpus = node_gpus(args, per_node)
    if args.cpus_per_node is None and "cpus" in per_node:
        args.cpus_per_node = per_node["cpus"]
    address = ""

    def start() -> list[tuple[subprocess.Popen, str]]:
        nonlocal address
        port = args.ray_port or free_ports(1)[0]
        address = f"{ip}:{port}"
        log(f"Ray head on {head} ({address}), workers on {', '.join(workers)}; per node: {per_node}; "
            f"each node declares {gpus if gpus is not None else 'the detected'} GPUs")
        head_process = subprocess.Popen(
            ray_start_command(ip, head_port=port, join=None, gpus=gpus,
                              cpus=args.cpus_per_node, object_store_mb=args.object_store_mb,
                              temp_dir=temp_root / f"ray{job}_{head}"),
            stdin=subprocess.DEVNULL, stdout=sys.stderr, start_new_session=True,
            env=_without(os.environ | ray_env, "RAY_ADDRESS"))
        worker_argv = [sys.executable, "-m", _MODULE, "--join", address, "--temp-root", str(temp_root)]
        for option, value in (("--cpus-per-node", args.cpus_per_node), ("--object-store-mb", args.object_store_mb)):
            if value is not None:
                worker_argv += [option, str(value)]
        if args.declare_gpus:
            worker_argv.append("--declare-gpus")
        elif gpus is not None:
            worker_argv += ["--node-gpus", str(gpus)]
        srun = ["srun", "--overlap", f"--jobid={job}", f"--nodes={len(workers)}", f"--ntasks={len(workers)}",
                "--ntasks-per-node=1", f"--nodelist={','.join(workers)}", "--kill-on-bad-exit=1"]
        if args.cpus_per_node is not None:  # the node's CPUs for its Ray, not the one core a bare step gets
            srun.append(f"--cpus-per-task={args.cpus_per_node}")
        if per_node.get("gpus"):
            srun.append(f"--gres=gpu:{per_node['gpus']}")
        worker_step = subprocess.Popen(srun + worker_argv, stdin=subprocess.DEVNULL, stdout=sys.stderr,
                                       env=_worker_env() | ray_env | {"RAY_ADDRESS": address}, start_new_session=True)
        return [(head_process, "Ray head"), (worker_step, "Ray worker step")]

    def wait(still_starting: Callable[[], None]) -> dict[str, float]:
        os.environ.update(ray_env)  # this process's own driver
        return wait_for_cluster(address, len(nodes), args.gpus_per_node * len(nodes) if args.gpus_per_node
                                else 0, args.timeout, still_starting)

    processes: list[tuple[subprocess.Popen, str]] = []
    with _terminate_on_sigterm():
        try:
            processes, joined = bring_up(start, wait, args.start_attempts, _stop)
            log(f"cluster ready: {joined}")
            _require_running(processes)
            result = subprocess.run(list(command), env=os.environ | ray_env | {"RAY_ADDRESS": address})
            log(f"command exited with status {result.returncode}")
            return result.returncode
        finally:
            for process, what in reversed(processes):
                _stop(process, what)


def node_gpus(args: argparse.Namespace, per_node: Mapping[str, int]) -> int | None:
    """GPUs each node's ``ray start`` declares: the GPUs Slurm gave each step (``--declare-gpus``), else the head's
    number (``--node-gpus``, a worker), else the allocation's per-node GPUs; None (Ray detects) only outside Slurm.

    A declared count above the devices this step sees would let Ray place GPU actors on devices it cannot reach.
    """
    if args.declare_gpus:
        return slurm_step_gpus()
    gpus = args.node_gpus if args.node_gpus is not None else per_node.get("gpus")
    visible = (env("CUDA_VISIBLE_DEVICES") or "").strip()
    if gpus is not None and visible and len([d for d in visible.split(",") if d.strip()]) < gpus:
        raise RuntimeError(f"the allocation has {gpus} GPUs per node but this step sees CUDA_VISIBLE_DEVICES="
                           f"{visible}; give the step the node's GPUs (--gres=gpu:{gpus})")
    return gpus


def join_cluster(args: argparse.Namespace) -> int:
    """One worker node (run by srun on each non-head node): ray start --block until stopped."""
    node = env("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    ip = node_address(node) if env("SLURM_JOB_ID") else socket.gethostbyname(socket.gethostname())
    command = ray_start_command(ip, head_port=None, join=args.join, gpus=node_gpus(args, {}), cpus=args.cpus_per_node,
                                object_store_mb=args.object_store_mb,
                                temp_dir=Path(args.temp_root) / f"ray{env('SLURM_JOB_ID') or 'nojob'}_{node}")
    log(f"Ray worker on {node} ({ip}) joining {args.join}")
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True,
                               env=_without(dict(os.environ), "RAY_ADDRESS"))
    with _terminate_on_sigterm():
        try:
            return process.wait()
        except KeyboardInterrupt:
            _stop(process, f"Ray worker on {node}")
            return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1:]
    parser = entry_parser(__doc__, summary="line", logs=False)
    parser.add_argument("--gpus-per-node", type=int, default=None,
                        help="GPUs each Ray node must contribute; the command waits until all have joined")
    parser.add_argument("--declare-gpus", action="store_true",
                        help="each Ray node advertises the GPUs Slurm gave its step (CUDA_VISIBLE_DEVICES) instead "
                             "of detecting them: for GPUs Ray cannot probe, e.g. the CI cluster's fake gres devices")
    parser.add_argument("--cpus-per-node", type=int, default=None, help="override Ray's CPU count per node")
    parser.add_argument("--ray-port", type=int, default=None, help="GCS port of the head (default: a free port)")
    parser.add_argument("--object-store-mb", type=int, default=None, help="Ray object store per node (MB)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for every node to join")
    parser.add_argument("--start-attempts", type=int, default=3,
                        help="times to start the cluster when a Ray node dies during start-up (Ray gives each "
                             "node a fixed 30 s to register; a loaded host can miss it)")
    parser.add_argument("--temp-root", default="/tmp", help="parent of each node's Ray temp dir (keep it short)")
    parser.add_argument("--node-gpus", type=int, default=None, help=argparse.SUPPRESS)  # a worker: the head's count
    parser.add_argument("--join", default=None, help=argparse.SUPPRESS)  # worker mode, run by our own srun
    args = parser.parse_args(argv)
    if args.join:
        return join_cluster(args)
    if not command:
        parser.error("give the command to run after `--`")
    nodes = allocation_nodes()
    if len(nodes) <= 1:
        log(f"{'one node' if nodes else 'no Slurm allocation'}: running the command without a Ray cluster")
        return subprocess.run(command).returncode
    return run_cluster(command, nodes, args)


if __name__ == "__main__":
    sys.exit(main())
