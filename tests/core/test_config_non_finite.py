"""Config values the schema let through (issue "Nothing silent"): NaN and infinite floats (in free-form sections
too), floats or booleans where an integer belongs and local paths that do not exist fail at parse time naming each
key, and ``snakemake -n`` names them all and plans nothing."""

from __future__ import annotations

import pytest

from tests.conftest import _tiny_config


@pytest.mark.parametrize("edit, key, says", [
    (lambda c: c["train"]["methods"]["softmax_exact"].update(tau=float("nan")), "train.methods.softmax_exact.tau",
     "nan"),
    (lambda c: c["theory"].update(taus=[float("inf")]), "theory.taus.0", "inf"),
    (lambda c: c["theory"].update(taus=[-float("inf")]), "theory.taus.0", "-inf"),
    (lambda c: c["theory"].update(group_size=8.0), "theory.group_size", "8.0 is not of type 'integer'"),
    (lambda c: c["theory"].update(group_size=True), "theory.group_size", "True is not of type 'integer'"),
    (lambda c: c["data"]["datasets"].update(deepmath={"sources": {"main": {"hub": "x", "local": "no/such.jsonl"}}}),
     "data.datasets.deepmath.sources.main.local", "does not exist"),
])
def test_config_rejects_non_finite_float_integers_and_missing_local_paths(tmp_path, edit, key, says):
    from pipeline_lib.core.config import ConfigError, validate_config
    from tests.conftest import REPO

    config = _tiny_config()
    edit(config)
    with pytest.raises(ConfigError) as excinfo:
        validate_config(config, REPO / "workflow/schemas/config.schema.yaml", base_dir=tmp_path)
    line = next((line for line in str(excinfo.value).splitlines() if f"'{key}'" in line), "")
    assert says in line, str(excinfo.value)


def test_non_finite_value_in_a_free_form_section_is_rejected():
    from pipeline_lib.core.config import ConfigError, validate_config
    from tests.conftest import REPO

    config = _tiny_config()
    config["data"]["datasets"]["poetry"] = {"synthesis": {"sampling": {"temperature": float("nan")}}}
    with pytest.raises(ConfigError, match=r"key 'data.datasets.poetry.synthesis.sampling.temperature': nan is not a"):
        validate_config(config, REPO / "workflow/schemas/config.schema.yaml")


def test_snakemake_dry_run_fails_at_parse_time_naming_each_key(workflow_copy):
    import subprocess
    import sys

    from tests.conftest import repo_env

    (workflow_copy / "bad.yaml").write_text(
        "label: test\ntheory: {taus: [.inf], group_size: 8.0}\n"
        "train: {methods: {softmax_exact: {advantage: softmax, tau: .nan, reward: verifier}}}\n"
        "data: {datasets: {deepmath: {enabled: true, sources: {main: {hub: zwhe99/DeepMath-103K,"
        " local: data/missing.jsonl}}}}}\n")
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "bad.yaml"], cwd=workflow_copy,
                            capture_output=True, text=True, timeout=300, env=repo_env())
    assert result.returncode != 0
    for key in ("theory.taus.0", "theory.group_size", "train.methods.softmax_exact.tau",
                "data.datasets.deepmath.sources.main.local"):
        assert f"key '{key}'" in result.stdout + result.stderr, result.stdout[-3000:]
    assert "Job stats" not in result.stdout  # nothing was planned
