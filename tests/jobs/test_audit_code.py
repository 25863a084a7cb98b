"""Outputs made with older code (issue "Nothing silent"): the audit flags an output whose code changed since it was
made, a new untracked module of the package and a deleted sidecar of an intermediate output; a step's code digest
follows its imports and is cached per process."""

from __future__ import annotations

import pytest


@pytest.fixture
def package_copy(tmp_path):
    """A copy of pipeline_lib that a test may edit, with a chain raw.csv -> features.parquet -> table.tex."""
    import shutil
    import subprocess
    import sys

    from tests.conftest import REPO

    root = tmp_path / "checkout"
    shutil.copytree(REPO / "pipeline_lib", root / "pipeline_lib", ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "raw.csv").write_text("x\n1\n")
    script = (
        "from pathlib import Path\n"
        "import pandas as pd\n"
        "from pipeline_lib.core.provenance import write_provenance\n"
        "pd.DataFrame({'x': [1]}).to_parquet('features.parquet')\n"
        "write_provenance(['features.parquet'], step='features', inputs=['raw.csv'],"
        " entry='pipeline_lib.core.theory.formulas')\n"
        "Path('table.tex').write_text('table')\n"
        "write_provenance(['table.tex'], step='table', inputs=['features.parquet'])\n"  # whole-package digest
    )
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", script], cwd=work, env=env, check=True, timeout=120)

    def audit() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipeline_lib", "audit", "table.tex"], cwd=work, env=env,
                              capture_output=True, text=True, timeout=120)

    return root / "pipeline_lib", work, audit


def test_audit_flags_outputs_made_with_older_code(package_copy):
    package, _work, audit = package_copy
    assert audit().returncode == 0, audit().stdout
    with open(package / "core" / "theory" / "formulas.py", "a") as handle:
        handle.write("\nEDITED = True\n")
    result = audit()
    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if "made with older code" in line]
    # both steps imported theory/formulas.py: the features step (its entry) and the table (whole package)
    changed = "changed pipeline_lib/core/theory/formulas.py"
    assert len(problems) == 2 and all(changed in line for line in problems), result.stdout


def test_audit_flags_an_untracked_new_module(package_copy):
    package, _work, audit = package_copy
    (package / "helpers_new.py").write_text("VALUE = 1\n")
    result = audit()
    assert result.returncode == 1 and "new pipeline_lib/helpers_new.py" in result.stdout, result.stdout
    # only the whole-package step is stale: pipeline_lib.core.theory.formulas does not import the new module
    assert sum("made with older code" in line for line in result.stdout.splitlines()) == 1


def test_audit_flags_a_deleted_sidecar_of_an_intermediate_output(package_copy):
    _package, work, audit = package_copy
    (work / "features.parquet.prov.json").unlink()
    result = audit()
    assert result.returncode == 1
    assert "features.parquet: no provenance sidecar" in result.stdout and "deleted since" in result.stdout
    assert "raw.csv" not in result.stdout  # its chain is cut at the deleted sidecar; raw.csv stays a raw input


def test_code_digest_follows_imports_and_is_cached_per_process():
    import time

    from pipeline_lib.core.provenance import code_digest, code_modules

    judge, trainer = code_modules("pipeline_lib.jobs.judge.score"), code_modules("pipeline_lib.jobs.engines.local.rl")
    assert "pipeline_lib/jobs/judge/parse.py" in judge and "pipeline_lib/jobs/judge/parse.py" not in trainer
    assert "pipeline_lib/jobs/engines/local/rl.py" in trainer and "pipeline_lib/jobs/engines/local/rl.py" not in judge
    assert "pipeline_lib/core/rl/losses.py" in trainer and "pipeline_lib/__init__.py" in trainer
    code_digest("pipeline_lib.jobs.engines.verl.train")
    start = time.perf_counter()
    for _ in range(20):
        code_digest("pipeline_lib.jobs.engines.verl.train")
    assert (time.perf_counter() - start) / 20 < 0.05  # cached: a Snakefile calls it once per rule
    with pytest.raises(ValueError, match="not a module"):
        code_digest("pipeline_lib.no_such_module")
