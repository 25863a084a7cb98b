#!/usr/bin/env python3
"""A real Slurm cluster on this machine, for CI: munged, slurmctld and two virtual slurmd nodes.

    python .ci/slurm/local_cluster.py start    # idempotent; waits until both nodes are idle
    python .ci/slurm/local_cluster.py status   # exit 0 if every recorded daemon is alive
    python .ci/slurm/local_cluster.py stop     # cancels this cluster's jobs, stops daemons by recorded PID

Debian's ``slurm-wlm`` and ``munge`` (``apt-get install slurm-wlm munge``) run here as root
without systemd. Every daemon runs in the foreground as a child we spawn, so its PID is known
exactly and ``stop`` signals only those PIDs (checked against /proc/<pid>/exe first, so a
recycled PID is never hit); nothing is ever killed by name.

Pitfalls this script handles (each seen on this machine):
- The Snakemake Slurm executor's job step strips every ``SLURM_*`` variable, ``SLURM_CONF`` too,
  so the config must sit at the compiled-in default ``/etc/slurm/slurm.conf``. The file is ours
  only if it carries ``MARKER``; a foreign config is never overwritten. ``stop`` removes it again: while a
  slurm.conf names a controller that is down, every ``scontrol`` waits about 9 s before failing, and the Snakemake
  Slurm plugin runs ``scontrol show config`` whenever Snakemake starts, so every later local run (the main job CI
  times after the tests, each test's Snakemake) started 9 s late. Without a config it fails at once.
- Without accounting (``AccountingStorageType=accounting_storage/none``) ``sacct`` knows no jobs;
  the profile must use ``slurm-status-command: squeue``, and ``MinJobAge`` is long enough that
  finished jobs stay visible to squeue between status checks.
- slurmctld and slurmd fail silently if their spool/state directories do not exist: created first.
- Two ``slurmd -N`` on one host need one port each and ``NodeHostname`` = the real host name.
- GPU requests only schedule on nodes that declare a ``gpu`` gres backed by device files, so we
  ``mknod`` character devices (clones of /dev/null: harmless if anything opens them).
- munged refuses to run as root and wants its key and directories owned by ``munge``.
- The machine has 2 cores: each virtual node declares 3 CPUs (``SlurmdParameters=config_overrides``
  lets slurmd accept more than the hardware), so the cluster runs 6 one-CPU jobs at once; most of a
  tiny job's wall time is Snakemake start-up and waiting, not computation.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

MARKER = "# written by .ci/slurm/local_cluster.py (pipeline CI cluster)"
CONF_DIR = Path("/etc/slurm")
STATE = Path(os.environ.get("PIPELINE_SLURM_STATE", "/var/lib/pipeline-ci-slurm"))
PARTITION = "ci"
NODES = ("ci-node1", "ci-node2")
CPUS_PER_NODE = 3
GPUS_PER_NODE = 2
MEMORY_MB_PER_NODE = 8000
CTLD_PORT = 16817
FIRST_SLURMD_PORT = 16818
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
MUNGE_KEY = Path("/etc/munge/munge.key")
REQUIRED = ("munged", "slurmctld", "slurmd", "sinfo", "scontrol", "scancel", "squeue", "sbatch", "srun")


def log(message: str) -> None:
    print(f"[local_cluster] {message}", flush=True)


def missing_binaries() -> list[str]:
    return [name for name in REQUIRED if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]


def binary(name: str) -> str:
    found = shutil.which(name) or str(Path("/usr/sbin", name))
    if not Path(found).exists():
        raise SystemExit(f"{name} not found: install Debian's slurm-wlm and munge (apt-get install slurm-wlm munge)")
    return found


def gpu_devices(node_index: int) -> list[Path]:
    return [STATE / "dev" / f"gpu{node_index * GPUS_PER_NODE + k}" for k in range(GPUS_PER_NODE)]


def slurm_conf(host: str) -> str:
    nodes = "\n".join(
        f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={FIRST_SLURMD_PORT + i} "
        f"CPUs={CPUS_PER_NODE} RealMemory={MEMORY_MB_PER_NODE} Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
        for i, name in enumerate(NODES)
    )
    return f"""{MARKER}
ClusterName=pipelineci
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={CTLD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
GresTypes=gpu
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=7200
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
StateSaveLocation={STATE}/ctld
SlurmdSpoolDir={STATE}/slurmd-%n
SlurmctldPidFile={STATE}/slurmctld.pid
SlurmdPidFile={STATE}/slurmd-%n.pid
SlurmctldLogFile={STATE}/log/slurmctld.log
SlurmdLogFile={STATE}/log/slurmd-%n.log
{nodes}
PartitionName={PARTITION} Nodes=ci-node[1-{len(NODES)}] Default=YES MaxTime=INFINITE State=UP
"""


def gres_conf() -> str:
    lines = [MARKER]
    for i, name in enumerate(NODES):
        devices = gpu_devices(i)
        lines.append(f"NodeName={name} Name=gpu File={devices[0].parent}/gpu[{i * GPUS_PER_NODE}-"
                     f"{i * GPUS_PER_NODE + GPUS_PER_NODE - 1}]")
    return "\n".join(lines) + "\n"


def write_owned(path: Path, text: str) -> None:
    """Write a config file unless someone else's config is already there."""
    if path.exists() and MARKER not in path.read_text(errors="replace"):
        raise SystemExit(f"{path} exists and was not written by this script; refusing to overwrite it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def remove_owned(path: Path) -> None:
    """Remove a config file this script wrote (never someone else's)."""
    if path.exists() and MARKER in path.read_text(errors="replace"):
        path.unlink()
        log(f"removed {path}")


def prepare() -> None:
    """Directories, fake GPU devices, configs and the munge key, all before any daemon starts."""
    for sub in ("ctld", "log", "dev", *(f"slurmd-{n}" for n in NODES)):
        (STATE / sub).mkdir(parents=True, exist_ok=True)
    for i in range(len(NODES)):
        for device in gpu_devices(i):
            if not device.exists():
                os.mknod(device, 0o666 | 0o020000, os.makedev(1, 3))  # character device, like /dev/null
    host = socket.gethostname()
    write_owned(CONF_DIR / "slurm.conf", slurm_conf(host))
    write_owned(CONF_DIR / "gres.conf", gres_conf())
    munge = pwd.getpwnam("munge")
    for directory, mode in ((Path("/run/munge"), 0o755), (Path("/var/log/munge"), 0o700),
                            (Path("/var/lib/munge"), 0o700), (MUNGE_KEY.parent, 0o700)):
        directory.mkdir(parents=True, exist_ok=True)
        os.chown(directory, munge.pw_uid, munge.pw_gid)
        directory.chmod(mode)
    if not MUNGE_KEY.exists():
        MUNGE_KEY.write_bytes(os.urandom(128))
    os.chown(MUNGE_KEY, munge.pw_uid, munge.pw_gid)
    MUNGE_KEY.chmod(0o400)


def pids_file() -> Path:
    return STATE / "pids.json"


def recorded() -> dict[str, int]:
    try:
        return json.loads(pids_file().read_text())
    except (OSError, ValueError):
        return {}


def record(pids: dict[str, int]) -> None:
    tmp = pids_file().with_suffix(".tmp")
    tmp.write_text(json.dumps(pids, indent=1))
    tmp.replace(pids_file())


def argv0_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return os.path.basename(handle.read().split(b"\0")[0].decode())
    except OSError:
        return None


def alive(name: str, pid: int) -> bool:
    """The PID runs the daemon we started under that name (guards against recycled PIDs).

    argv[0], not /proc/<pid>/exe: Debian's slurmctld is an alternatives link to slurmctld-wlm.
    """
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and argv0_of(pid) == name.split(":")[0]


def spawn(name: str, argv: list[str], user: str | None = None) -> int:
    logfile = open(STATE / "log" / f"{name.replace(':', '-')}.stdout", "ab")  # noqa: SIM115 (child keeps it)
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logfile, stderr=subprocess.STDOUT,
                               start_new_session=True, user=user, group=user)
    logfile.close()
    return process.pid


def munge_works() -> bool:
    if not MUNGE_SOCKET.exists() or shutil.which("munge") is None:
        return False
    encode = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
    if encode.returncode != 0:
        return False
    decode = subprocess.run(["unmunge"], input=encode.stdout, capture_output=True, timeout=10)
    return decode.returncode == 0


def wait_for(what: str, check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}; logs in {STATE / 'log'}")


def node_states() -> dict[str, str]:
    result = subprocess.run(["sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N %t"], capture_output=True,
                            text=True, timeout=20)
    if result.returncode != 0:
        return {}
    return dict(line.split() for line in result.stdout.splitlines() if line.strip())


def start(timeout: float) -> None:
    missing = missing_binaries()
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: apt-get install slurm-wlm munge")
    prepare()
    pids = {name: pid for name, pid in recorded().items() if alive(name, pid)}
    if "munged" not in pids and not munge_works():
        pids["munged"] = spawn("munged", [binary("munged"), "--foreground"], user="munge")
        record(pids)
    wait_for("munged", munge_works, 30)
    if "slurmctld" not in pids:
        # -c: start from an empty job state (a fresh cluster every start); -D: foreground.
        pids["slurmctld"] = spawn("slurmctld", [binary("slurmctld"), "-D", "-c", "-i"])
        record(pids)
        wait_for("slurmctld", lambda: subprocess.run(["scontrol", "ping"], capture_output=True, text=True,
                                                     timeout=20).stdout.count("UP") > 0, 60)
    for node in NODES:
        key = f"slurmd:{node}"
        if key not in pids:
            pids[key] = spawn(key, [binary("slurmd"), "-D", "-N", node])
            record(pids)
    wait_for(f"nodes {', '.join(NODES)} idle in partition {PARTITION}",
             lambda: (states := node_states()) and all(states.get(n, "").startswith(("idle", "mix", "alloc"))
                                                       for n in NODES), timeout)
    for name, pid in pids.items():
        if not alive(name, pid):
            raise SystemExit(f"{name} (pid {pid}) died during start-up; see {STATE / 'log'}")
    log(f"running: {json.dumps(pids)}; partition {PARTITION} nodes {node_states()}")


def stop() -> None:
    pids = recorded()
    if not pids:
        log("not running (no recorded PIDs)")
        return
    if "slurmctld" in pids and alive("slurmctld", pids["slurmctld"]):
        subprocess.run(["scancel", "--partition", PARTITION], capture_output=True, timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            queue = subprocess.run(["squeue", "-h", "-p", PARTITION], capture_output=True, text=True, timeout=20)
            if queue.returncode != 0 or not queue.stdout.strip():
                break
            time.sleep(0.5)
    # slurmd first (they hand back their steps), then the controller, munged last.
    order = sorted(pids, key=lambda n: (0 if n.startswith("slurmd") else 1 if n == "slurmctld" else 2))
    for name in order:
        pid = pids[name]
        if not alive(name, pid):
            continue
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while alive(name, pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.2)
        if alive(name, pid):
            os.kill(pid, signal.SIGKILL)
        _reap(pid)
        log(f"stopped {name} (pid {pid})")
    pids_file().unlink(missing_ok=True)
    for name in ("slurm.conf", "gres.conf"):
        remove_owned(CONF_DIR / name)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def status() -> int:
    pids = recorded()
    states = {name: alive(name, pid) for name, pid in pids.items()}
    print(json.dumps({"daemons": {n: {"pid": pids[n], "alive": a} for n, a in states.items()},
                      "nodes": node_states() if states.get("slurmctld") else {}}, indent=1))
    return 0 if states and all(states.values()) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("start", "stop", "status"))
    parser.add_argument("--timeout", type=float, default=90, help="seconds to wait for the nodes to be idle")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the cluster writes /etc/slurm and runs munged as the munge user")
    if args.command == "start":
        start(args.timeout)
        return 0
    if args.command == "stop":
        stop()
        return 0
    return status()


if __name__ == "__main__":
    sys.exit(main())
