"""One provenance writer: a ``<output>.prov.json`` sidecar for every file a step makes.

A sidecar records what an auditor needs to trace a number back: the step, its
resolved parameters and config digest, every input and output with size and
sha256, the code version (git commit, dirty flag, hash of the uncommitted diff),
the digest of the library code the step ran (:func:`code_digest`), software
versions, host (the machine: CPU model and instruction set, torch's threads and determinism settings, which is what
makes the same code give bit-identical numbers on one machine and different ones on another) and timing. Keys or
secrets never belong in ``params``.

The code digest covers the ``pipeline_lib`` modules the step's entry point imports
(static, transitive, from the files on disk, so untracked modules count; a string naming a module counts as an import,
verl's workers and the launcher load them so, except in the planner, whose strings name the entry points of the jobs it
plans), which is what lets the audit and Snakemake's params trigger notice an output made with older code while an
edit to unrelated code (the judge, for a trained model) leaves it alone. Each module counts by its syntax tree without
docstrings (:func:`code_text`): a comment, docstring or layout edit changes no digest (``docs/design.md``).
It also covers the files outside the package that those modules read as part of their
code: a module names them by a repository-relative string constant under ``config/``
(``"config/prompts"``: the judge's rubric prompts), a file or a folder of files, so an
edited rubric prompt makes the judge's outputs stale exactly as an edited judge module does.

A sidecar written inside the workflow also records the config its step was made with (:func:`step_config`): the
sections of the resolved config the step reads, each setting by its dotted key with a digest of its value, so the
audit can name the setting (``train.sft.lr``) that changed since, as Snakemake's parameter trigger replans the step.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from functools import cache, lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from pipeline_lib.core.env import env
from pipeline_lib.core.io import sha256_file, write_json

__all__ = [
    "SIDECAR_SUFFIX",
    "code_digest",
    "code_modules",
    "code_text",
    "code_version",
    "config_digest",
    "config_settings",
    "entry_module",
    "file_record",
    "hardware",
    "numerics",
    "resolved_config_file",
    "running_entry",
    "step_config",
    "step_sections",
    "write_provenance",
]

SIDECAR_SUFFIX = ".prov.json"
_TRACKED_PACKAGES = (
    "pipeline_lib", "torch", "numpy", "scipy", "pandas", "matplotlib", "snakemake",
    "transformers", "verl", "vllm", "math-verify", "openai",
)
_REPO_ROOT = Path(__file__).resolve().parents[2]
_PACKAGE = "pipeline_lib"
_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_DATA_SUFFIXES = (".yaml", ".yml", ".json", ".txt", ".jinja")  # package files read at run time (agent-loop configs)
_MODULE_STRING = re.compile(r"^pipeline_lib(?:[./][A-Za-z_][A-Za-z0-9_]*)+(?:\.py)?$")
#: The planner's modules name the entry points of the jobs they plan (``"pipeline_lib.jobs.engines.local.rl"``): data
#: to the planner, each job's own code to that job's digest, so a module string there is not followed.
_PLANNER = _PACKAGE + ".plan"
_REPO_DATA_STRING = re.compile(r"^config(?:/[A-Za-z0-9_.-]+)+$")  # a module's data outside the package (prompts)


def _module_file(name: str) -> Path | None:
    """The file of module ``pipeline_lib.a.b`` (a package's ``__init__.py``), or None (an attribute, not a module)."""
    parts = name.split(".")
    if parts[0] != _PACKAGE:
        return None
    base = _PACKAGE_DIR.joinpath(*parts[1:])
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else None


#: Scan results by content (this file's own bytes, the module's name and its source): a Snakemake start asks for
#: ~100 of them, and parsing them all again in every Snakemake and job process cost ~0.7 CPU s each time. Only in a
#: checkout (Snakemake's own folder there), never inside an installed package.
_SCAN_CACHE = _REPO_ROOT / ".snakemake" / "module-scan" if (_REPO_ROOT / "Snakefile").is_file() else None


@cache
def _scan(path: Path, module: str, stamp: tuple[int, int]) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """The ``pipeline_lib`` names a module may import, the ``config/...`` strings it names and the digest of its code
    (:func:`_parse`), kept in :data:`_SCAN_CACHE` under the digest of what decides them (so an edit is never answered
    from it)."""
    source = path.read_bytes()
    if _SCAN_CACHE is None:
        return _parse(source, path, module)
    key = hashlib.sha256(b"\0".join([_scanner_digest().encode(), module.encode(), source])).hexdigest()
    cached = _SCAN_CACHE / f"{key}.json"
    try:
        names, data, code = json.loads(cached.read_text())
        return tuple(names), tuple(data), code
    except (OSError, ValueError):
        pass
    scanned = _parse(source, path, module)
    with suppress(OSError):  # a read-only checkout: scanned again next time
        write_json(cached, [list(scanned[0]), list(scanned[1]), scanned[2]])
    return scanned


@cache
def _scanner_digest() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def _without_docstrings(tree: ast.AST) -> ast.AST:
    """``tree`` with every statement that is only a string (docstrings, attribute notes) taken out: text that no
    execution reads (``__doc__`` aside, which no job's output depends on)."""
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            kept = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                            and isinstance(s.value.value, str))]
            setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
    return tree


def code_text(source: bytes | str, filename: str = "<module>") -> str:
    """What a module's digest covers: its syntax tree (``ast.dump``: no comments, no positions, no formatting) with
    the docstrings left out, so an edit of wording or layout reruns nothing and an edit of code reruns its jobs."""
    return ast.dump(_without_docstrings(ast.parse(source, filename=filename)))


def source_digest(name: str, source: bytes) -> str:
    """The digest :func:`code_modules` records for a file named ``name`` holding ``source``: a module's code
    (:func:`code_text`), any other file's bytes. What ``python -m pipeline_lib reruns`` compares two versions by."""
    if name.endswith(".py"):
        return hashlib.sha256(code_text(source, name).encode()).hexdigest()
    return hashlib.sha256(source).hexdigest()


def _parse(source: bytes, path: Path, module: str) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """One parse of a module: the ``pipeline_lib`` names it may import (import statements anywhere, lazy ones in
    functions included, relative imports resolved, and string constants naming a module: verl's reward-function
    paths), the ``config/...`` strings it names (:func:`_repo_data`) and the sha256 of :func:`code_text`."""
    tree = _without_docstrings(ast.parse(source, filename=str(path)))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names: list[str] = []
    data: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                prefix = ".".join([*base, *([node.module] if node.module else [])])
            else:
                prefix = node.module or ""
            names += [prefix, *(f"{prefix}.{alias.name}" for alias in node.names if alias.name != "*")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _MODULE_STRING.match(node.value) and not module.startswith(_PLANNER):
                names.append(node.value.removesuffix(".py").replace("/", "."))
            elif _REPO_DATA_STRING.match(node.value):
                data.add(node.value)
    code = hashlib.sha256(ast.dump(tree).encode()).hexdigest()
    return tuple(n for n in names if n == _PACKAGE or n.startswith(_PACKAGE + ".")), tuple(sorted(data)), code


def _imported_names(path: Path, module: str, stamp: tuple[int, int]) -> tuple[str, ...]:
    """Every ``pipeline_lib`` name a module may import (see :func:`_scan`)."""
    return _scan(path, module, stamp)[0]


@cache
def _repo_data(path: Path, module: str, stamp: tuple[int, int]) -> tuple[Path, ...]:
    """The checkout's files a module names by a string constant ``config/...`` (a folder: every file in it)."""
    files: set[Path] = set()
    for relative in _scan(path, module, stamp)[1]:
        target = _REPO_ROOT / relative
        if target.is_dir():
            files.update(p for p in target.rglob("*") if p.is_file() and not p.name.startswith("."))
        elif target.is_file():
            files.add(target)
    return tuple(sorted(files))


@cache
def _data_beside(folder: Path, stamp: tuple[int, int]) -> tuple[Path, ...]:
    """The data files in a package folder (re-listed when the folder's stamp changes: a file added or removed)."""
    return tuple(p for p in folder.iterdir() if p.suffix in _DATA_SUFFIXES and p.is_file())


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _package_state() -> tuple[tuple[Path, int, int], ...]:
    """Every package file with its mtime and size: the key that invalidates the per-process caches after an edit."""
    files = sorted(p for p in _PACKAGE_DIR.rglob("*") if "__pycache__" not in p.parts
                   and p.suffix in (".py", *_DATA_SUFFIXES) and p.is_file())
    return tuple((p, *_stamp(p)) for p in files)


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


def _walk(entry: str) -> tuple[Path, ...]:
    """The files module ``entry`` imports, transitively (import statements anywhere, parents' ``__init__``), plus the
    data files beside each and the checkout's files each names (:func:`_repo_data`)."""
    if _module_file(entry) is None:
        raise ValueError(f"code digest: {entry!r} is not a module under {_PACKAGE_DIR}")
    files: set[Path] = set()
    todo, seen = [entry], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(name)
        todo += _parents(name)  # importing pipeline_lib.a.b runs pipeline_lib/__init__ and pipeline_lib/a/__init__
        if path is None or path in files:
            continue
        files.add(path)
        stamp = _stamp(path)
        files.update(_data_beside(path.parent, _stamp(path.parent)))
        files.update(_repo_data(path, name, stamp))
        todo += _imported_names(path, name, stamp)
    return tuple(sorted(files))


def _watched(files: Iterable[Path]) -> tuple[tuple[Path, tuple[int, int] | None], ...]:
    """Stamps that change whenever a closure could: its files, and the folders holding them (a file added, removed or
    renamed there changes the folder's mtime; a new module can enter the closure only through an edited import or a
    new file in such a folder)."""
    paths = sorted({*files, *(p.parent for p in files)})
    return tuple((p, _stamp_or_none(p)) for p in paths)


def _stamp_or_none(path: Path) -> tuple[int, int] | None:
    try:
        return _stamp(path)
    except FileNotFoundError:
        return None


_CLOSURES: dict[str, tuple[tuple[Path, ...], tuple[tuple[Path, tuple[int, int] | None], ...]]] = {}


def _closure(entry: str | None) -> tuple[Path, ...]:
    """The files behind ``entry`` (every package file when None), re-walked only when one of its watched stamps
    changed: Snakemake asks for one per rule at every parse, and the walk of the whole package is what costs."""
    if entry is None:  # no known entry point (a notebook, a test): every file of the package
        return tuple(p for p, *_ in _package_state())
    cached = _CLOSURES.get(entry)
    if cached is not None and all(_stamp_or_none(path) == stamp for path, stamp in cached[1]):
        return cached[0]
    files = _walk(entry)
    _CLOSURES[entry] = files, _watched(files)
    return files


@cache
def _file_sha256(path: Path, stamp: tuple[int, int]) -> str:
    """A module's digest is its code's (:func:`code_text`); a data file's, its bytes'."""
    if path.suffix == ".py":
        return _scan(path, _module_name(path), stamp)[2]
    return sha256_file(path)


def _module_name(path: Path) -> str:
    parts = path.relative_to(_PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def code_modules(entry: str | None = None) -> dict[str, str]:
    """The digest of every package file the entry module imports (transitively), by path relative to the checkout: a
    module's code (:func:`code_text`, so comments and docstrings count for nothing), a data file's bytes.

    Cached per process by file mtime and size (the workflow calls this for every rule at parse time).
    """
    return {str(p.relative_to(_REPO_ROOT)): _file_sha256(p, _stamp(p)) for p in _closure(entry)}


#: Every digest :func:`code_digest` gave in this process -> its entry module: what lets ``python -m pipeline_lib
#: reruns`` read a job's ``code`` parameter back as the code it covers (the rules' own digests, no second list).
_GIVEN: dict[str, str | None] = {}


def code_digest(entry: str | None = None) -> str:
    """One sha256 over :func:`code_modules`; a rule parameter, so Snakemake reruns a job whose code changed."""
    digest = hashlib.sha256(json.dumps(code_modules(entry), sort_keys=True).encode()).hexdigest()
    _GIVEN[digest] = entry
    return digest


def digest_entries(parameter: str) -> list[str | None]:
    """The entry modules whose :func:`code_digest` (given in this process) a rule's ``code`` parameter is made of
    (one digest, several joined by spaces, or concatenated); a digest this process never gave is an error."""
    digests = re.findall(r"[0-9a-f]{64}", parameter)
    if not digests or "".join(digests) != re.sub(r"\s+", "", parameter):
        raise ValueError(f"code parameter {parameter[:80]!r} is not made of code digests")
    unknown = [d for d in digests if d not in _GIVEN]
    if unknown:
        raise ValueError(f"code digest {unknown[0][:16]}... was not given by code_digest in this process")
    return [_GIVEN[d] for d in digests]


_RUNNING_ENTRY: ContextVar[str | None] = ContextVar("running_entry", default=None)


@contextmanager
def running_entry(module: str) -> Iterator[None]:
    """Within this block, :func:`entry_module` is ``module``: a process that runs several entry points one after
    another (:mod:`pipeline_lib.jobs.engines.local.batch`) records each step's own code in the sidecars it writes."""
    token = _RUNNING_ENTRY.set(module)
    try:
        yield
    finally:
        _RUNNING_ENTRY.reset(token)


def entry_module() -> str | None:
    """The ``pipeline_lib`` module this process runs as (``python -m pipeline_lib.x.y``, or the step of a batch that
    is running), else None."""
    if _RUNNING_ENTRY.get() is not None:
        return _RUNNING_ENTRY.get()
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    return name if isinstance(name, str) and _module_file(name) is not None else None


def config_digest(config: Mapping[str, Any]) -> str:
    """sha256 of the config as canonical JSON (sorted keys), so equal configs share a digest."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def resolved_config_file(config: Mapping[str, Any], root: str | os.PathLike[str] = ".snakemake/pipeline") -> Path:
    """The workflow's resolved config (schema defaults filled) as JSON, named by its digest, which every job reads
    through ``PIPELINE_CONFIG_FILE`` to record the settings its step used (:func:`step_config`)."""
    path = Path(root) / f"config-{config_digest(config)}.json"
    if not path.is_file():
        write_json(path, dict(config))
    return path


def _training_sections(task: str, name: str, config: Mapping[str, Any]) -> list[str]:
    train = config.get("train", {}) if isinstance(config.get("train"), Mapping) else {}
    common = ["train.engine", "train.model", "train.verl", f"train.task_settings.{task}"]
    if name == "sft":
        return [*common, "train.sft"]
    if name in (train.get("methods") or {}):
        return [*common, "train.rl", f"train.methods.{name}"]
    if name in (train.get("baselines") or {}):
        return [*common, "train.sft", "train.rl", f"train.baselines.{name}"]
    return [*common, "train.sft", "train.rl", "train.methods", "train.ablation", "train.scale"]  # a study's cell


def step_sections(step: str, output: str, params: Mapping[str, Any], config: Mapping[str, Any]) -> list[str] | None:
    """The config sections (dotted keys) a step's output depends on, or None for a step without a known set.

    What lists runs (``train.seeds``, ``train.tasks``, ``data.tiny.tasks``) is left out: adding a seed makes new runs,
    it does not change the ones made. A training run is found by its directory, ``results/train/<task>/<name>/...``.
    """
    if step == "data_tiny":
        return ["seed", *(f"data.tiny.{k}" for k in config["data"]["tiny"] if k not in ("tasks", "reward_weights")),
                f"data.tiny.reward_weights.{params.get('task')}"]
    if step == "data_tokenizer":
        return ["data.tokenizer"]
    if step == "data_build":
        return [f"data.datasets.{params.get('dataset')}"]
    if step == "data_imagenet":
        return ["imagenet.dataset"]
    if step.startswith("train_") or step == "annotate_rationales":
        parts = Path(output).parts
        if "train" in parts and len(parts) > parts.index("train") + 2:
            return _training_sections(parts[parts.index("train") + 1], parts[parts.index("train") + 2], config)
        return None
    if step == "imagenet_train":
        return [f"imagenet.{k}" for k in config.get("imagenet", {}) if k not in ("seeds", "label", "enabled")]
    if step == "eval_checkpoint":
        return [f"eval.{k}" for k in config.get("eval", {}) if k != "transfer"]
    if step.startswith("eval_"):
        return ["eval"]
    if step.startswith("judge_"):
        return ["judge"]
    if step.startswith("paper_theory"):
        return ["theory", "seed"]
    if step == "paper_imagenet":
        return ["label", "report", "imagenet.label"]
    if step == "paper_nonverifiable":  # the primary judge's display name
        return ["label", "report", "judge.primary.label"]
    if step == "paper_judge_validation":  # both judges' display names
        return ["label", "report", "judge.primary.label", "judge.second.label"]
    if step.startswith("paper_"):
        return ["label", "report"]
    return None


_ABSENT = "absent"


def config_settings(config: Mapping[str, Any], sections: Iterable[str]) -> dict[str, str]:
    """Each setting under ``sections`` by dotted key, with a digest of its value (a list is one setting; a key the
    config lacks is ``absent``): what a sidecar records and the audit compares."""
    settings: dict[str, str] = {}

    def walk(key: str, value: Any) -> None:
        if isinstance(value, Mapping) and value:
            for child in sorted(value):
                walk(f"{key}.{child}", value[child])
        else:
            settings[key] = config_digest({"value": value})[:16]

    for section in sections:
        node: Any = config
        for part in section.split("."):
            node = node.get(part, _ABSENT) if isinstance(node, Mapping) else _ABSENT
        if node is _ABSENT:
            settings[section] = _ABSENT
        else:
            walk(section, node)
    return settings


def step_config(step: str, output: str, params: Mapping[str, Any],
                config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a sidecar records of the config its step used: the sections (:func:`step_sections`) and their settings
    (:func:`config_settings`); None outside the workflow (no config) or for a step without a known set."""
    if config is None:
        return None
    sections = step_sections(step, output, params, config)
    if sections is None:
        return None
    return {"sections": sections, "settings": config_settings(config, sections)}


def _workflow_config() -> Mapping[str, Any] | None:
    """The resolved config of the workflow that started this job (``PIPELINE_CONFIG_FILE``), or None."""
    path = env("PIPELINE_CONFIG_FILE")
    if path is None:
        return None
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FileNotFoundError(f"PIPELINE_CONFIG_FILE={path}: the workflow's resolved config cannot be read "
                                f"({exc})") from None
    return config if isinstance(config, dict) else None


def _git(*args: str) -> bytes | None:
    try:
        return subprocess.run(
            ["git", "-C", str(_REPO_ROOT), *args], capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


@lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """Git commit of the package's checkout, whether it is dirty, and a hash of the diff."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    diff = _git("diff", "HEAD")
    return {
        "git_commit": commit.decode().strip() if commit else None,
        "dirty": bool(status and status.strip()),
        "diff_sha256": hashlib.sha256(diff).hexdigest() if diff else None,
        "pipeline_lib_version": _package_version("pipeline_lib"),
    }


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def software_versions() -> dict[str, str | None]:
    versions = {name: _package_version(name) for name in _TRACKED_PACKAGES}
    versions["python"] = sys.version.split()[0]
    return versions


def hardware() -> dict[str, Any]:
    """CPU model and count; GPU model/count/driver when nvidia-smi is present."""
    info: dict[str, Any] = {"hostname": socket.gethostname(), "platform": platform.platform(),
                            "cpu_count": os.cpu_count(), "cpu_model": platform.processor() or platform.machine()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if shutil.which("nvidia-smi"):
        try:
            query = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=30, check=True).stdout.strip().splitlines()
            info["gpus"] = query
            info["gpu_count"] = len(query)
        except (OSError, subprocess.SubprocessError):
            info["gpus"] = "nvidia-smi failed"
    return info


#: Environment variables that set thread pools or hashing/cuBLAS determinism, recorded as set (absent: unset).
_NUMERIC_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PYTHONHASHSEED",
                "CUBLAS_WORKSPACE_CONFIG", "ATEN_CPU_CAPABILITY")


def numerics() -> dict[str, Any]:
    """What decides a step's floating-point results besides its code and seeds: torch's version, thread counts,
    the CPU kernels it dispatches to, its determinism switches and the global seed, read from the running process.

    torch is read only when the step already imported it (a report step never pays for the import); then
    ``torch`` is None."""
    record: dict[str, Any] = {"env": {key: value for key, value in os.environ.items() if key in _NUMERIC_ENV},
                              "torch": None}
    torch = sys.modules.get("torch")
    if torch is None:
        return record
    record["torch"] = {
        "version": torch.__version__,
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "initial_seed": torch.initial_seed(),
        "cuda": torch.version.cuda,
    }
    return record


def _code_record(entry: str | None) -> dict[str, Any]:
    return {"entry": entry, "sha256": code_digest(entry), "modules": code_modules(entry)}


def file_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    return {"path": str(path), "bytes": path.stat().st_size, "sha256": sha256_file(path)}


def _hub_revisions() -> dict[str, Any]:
    """``{"hub_revisions": {repository: commit}}``: the hub lock the workflow exported (PIPELINE_HUB_LOCK, a plan that
    reads the hub), the commits every hub read of the job resolved to offline; empty otherwise."""
    path = env("PIPELINE_HUB_LOCK")
    if not path or not Path(path).is_file():
        return {}
    return {"hub_revisions": json.loads(Path(path).read_text()).get("repos", {})}


def write_provenance(
    outputs: Iterable[str | os.PathLike[str]],
    *,
    step: str,
    inputs: Iterable[str | os.PathLike[str]] = (),
    params: Mapping[str, Any] | None = None,
    config_sha256: str | None = None,
    seeds: Mapping[str, int] | None = None,
    started_at: float | None = None,
    entry: str | None = None,
) -> list[Path]:
    """Write one sidecar per output, each listing every input and output of the step.

    ``entry`` is the step's entry module (default: the module run with ``python -m``); its code digest is recorded.
    An input without a sidecar is recorded as ``raw``, so a sidecar deleted later is told from a raw input.
    """
    outputs = [Path(p) for p in outputs]
    inputs = [Path(p) for p in inputs]
    missing = [str(p) for p in outputs + inputs if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"provenance for step {step!r}: missing file(s) {missing}")
    record = {
        "step": step,
        "params": dict(params or {}),
        # the workflow exports the digest of the whole resolved config to every job it starts
        "config_sha256": config_sha256 or env("PIPELINE_CONFIG_SHA256"),
        "seeds": dict(seeds or {}),
        "inputs": [file_record(p) | {"provenance": str(p) + SIDECAR_SUFFIX,
                                     "raw": not Path(str(p) + SIDECAR_SUFFIX).is_file()} for p in inputs],
        "outputs": [file_record(p) for p in outputs],
        "code": code_version(),
        "code_digest": _code_record(entry or entry_module()),
        "software": software_versions(),
        "host": hardware() | {"numerics": numerics()},
        "slurm": {key: value for key in ("SLURM_JOB_ID", "SLURM_JOB_PARTITION", "SLURM_JOB_NODELIST")
                  if (value := env(key)) is not None},
        "started_at": started_at,
        "finished_at": time.time(),
    }
    record |= _hub_revisions()
    config = _workflow_config()
    sidecars = []
    for output in outputs:
        sidecar = output.with_name(output.name + SIDECAR_SUFFIX)
        made_with = step_config(step, str(output), record["params"], config)
        write_json(sidecar, record | {"output": str(output)} | ({"step_config": made_with} if made_with else {}))
        sidecars.append(sidecar)
    return sidecars
