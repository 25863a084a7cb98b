"""Configs refused before anything evaluates them (issue 60 item 6): a YTE template (``__use_yte__``, whose Python
Snakemake runs while loading it), YAML anchors and aliases (a "billion laughs" file cost ~55 CPU-minutes before
"unknown key") and a file that is not UTF-8 (a Latin-1 config gave Snakemake's traceback) are refused by the workflow
profile's hook, before Snakemake parses ``--configfile``, with one line naming the file and the line; the same check
runs in every project reader of a config. Each case is time-bounded. Rows of docs/hostile_cases.md."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline_lib.core.config import ConfigError, load_config_file
from pipeline_lib.core.yaml_files import (
    ALIAS_BUDGET,
    YAMLFileError,
    config_file_problem,
    load_yaml,
    refuse_unsafe_config_arguments,
)

REPO = Path(__file__).resolve().parents[2]


def _bomb(path: Path, levels: int = 9) -> Path:
    lines = ["label: tiny", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    path.write_text("\n".join(lines) + "\n")
    return path


CASES = {  # name -> (file content, what the refusal names)
    "yte": ("label: tiny\n__use_yte__: true\n?if True:\n  x: ?open('{marker}', 'w').write('ran')\n",
            "line 2: `__use_yte__`"),
    "latin1": (b"label: tiny\nnote: caf\xe9\n", "line 2: not UTF-8 text"),
    "anchor": ("label: tiny\ntrain: &t {seed: 1}\neval: *t\n", "line 2: YAML anchor or alias &t"),
}


def _write(tmp_path: Path, name: str) -> Path:
    content, _ = CASES[name]
    path = tmp_path / f"{name}.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content.replace("{marker}", str(tmp_path / "marker")))
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_unsafe_config_is_refused_naming_file_and_line(tmp_path, name):
    path = _write(tmp_path, name)
    problem = config_file_problem(path)
    assert problem is not None and problem.startswith(f"{path}, ") and CASES[name][1] in problem, problem
    with pytest.raises(ConfigError, match=CASES[name][1]):
        load_config_file(path)


def test_a_billion_laughs_config_is_refused_in_bounded_time(tmp_path):
    path = _bomb(tmp_path / "bomb.yaml")
    started = time.process_time()
    with pytest.raises(ConfigError, match=r"line 2: YAML anchor or alias &a0"):
        load_config_file(path)
    # a file that may use aliases (the Slurm profile shares resource blocks) is held to a budget of values instead
    with pytest.raises(YAMLFileError, match=rf"line \d+: its aliases expand to more than {ALIAS_BUDGET:,} values"):
        load_yaml(path)
    assert time.process_time() - started < 5  # the events are read, nothing is expanded or walked


def test_the_slurm_profile_aliases_stay_within_the_budget():
    assert load_yaml(REPO / "profiles/slurm/config.yaml")["set-resources"]


def test_the_configfile_arguments_are_found_in_every_spelling(tmp_path):
    bad = _write(tmp_path, "anchor")
    for argv in (["-n", "--configfile", str(REPO / "config/config.yaml"), str(bad)], [f"--configfile={bad}"],
                 ["--configfiles", str(bad), "-j", "1"]):
        with pytest.raises(YAMLFileError, match="refused before Snakemake loads it"):
            refuse_unsafe_config_arguments(argv)
    refuse_unsafe_config_arguments(["-n", "--configfile", str(REPO / "config/config.yaml"), str(bad) + "x", "-j",
                                    "1", str(bad)])  # a missing file is Snakemake's to report; a target is no config


@pytest.mark.parametrize("name", ["yte", "latin1"])
def test_snakemake_refuses_the_config_before_loading_it(tmp_path, name):
    """The end-to-end case: `snakemake -n` with the file exits at the profile, in seconds, one line naming the file
    and line; the YTE template's expression never ran (its marker file is not written)."""
    path = _write(tmp_path, name)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "config/config.yaml", str(path)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert f"refused before Snakemake loads it: config file {path}, {CASES[name][1]}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "marker").exists()
