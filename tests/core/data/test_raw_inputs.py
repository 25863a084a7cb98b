"""Raw dataset files are inputs (issue 35, class 2): editing the local file behind
``data.datasets.<name>.sources.<role>.local`` after a build replans the build, and the audit of what was built names
the file."""

import json
import shutil

import pytest
import yaml

from pipeline_lib.core.config import validate_config
from pipeline_lib.core.data.real import source_files
from pipeline_lib.jobs.audit import audit, current_config
from tests.conftest import FIXTURES, REPO, real_spec, snakemake

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"


def test_source_files_are_each_roles_local_file_or_the_readable_files_of_its_folder():
    spec = real_spec("gsm8k")
    assert source_files(spec) == [str(FIXTURES / "gsm8k/cot/train.jsonl"), str(FIXTURES / "gsm8k/main/test.jsonl"),
                                  str(FIXTURES / "gsm8k/main/train.jsonl")]
    assert source_files(real_spec("deepmath")) == [str(FIXTURES / "deepmath/train.jsonl")]
    assert source_files({"enabled": False}) == []
    assert source_files({"sources": {"main": {"hub": "a/b"}}}) == []


@pytest.mark.slow  # three Snakemake runs (about 20 CPU s)
def test_editing_a_raw_source_replans_the_build_and_fails_the_audit(workflow_copy, monkeypatch):
    raw = workflow_copy / "raw/deepmath.jsonl"
    raw.parent.mkdir()
    shutil.copy(FIXTURES / "deepmath/train.jsonl", raw)
    config = validate_config(yaml.safe_load((REPO / "config/config.yaml").read_text()), SCHEMA)
    config["data"]["datasets"]["deepmath"] = real_spec("deepmath") | {"sources": {"main": {
        "hub": "zwhe99/DeepMath-103K", "local": "raw/deepmath.jsonl"}}}
    (workflow_copy / "raw.yaml").write_text(yaml.safe_dump(config))
    target = "results/data/deepmath/rl_test.parquet"
    built = snakemake(workflow_copy, target, "--cores", "1", "--configfile", "raw.yaml")
    assert built.returncode == 0, built.stderr[-3000:]
    sidecar = json.loads((workflow_copy / f"{target}.prov.json").read_text())
    assert [entry["path"] for entry in sidecar["inputs"]] == ["raw/deepmath.jsonl"]
    # the job recorded the settings it read (class 11): the audit under a changed setting names it
    assert sidecar["step_config"]["sections"] == ["data.datasets.deepmath"]
    monkeypatch.chdir(workflow_copy)
    config = current_config(["raw.yaml"])  # as `audit --configfile raw.yaml` resolves it
    changed = json.loads(json.dumps(config))
    changed["data"]["datasets"]["deepmath"]["holdout_fraction"] = 0.25
    assert not [p for p in audit(target, config).problems if "config" in p]  # (a dirty checkout is a problem too)
    assert [p for p in audit(target, changed).problems if "config" in p] == [
        f"{target}: made with another config (step data_build): changed data.datasets.deepmath.holdout_fraction"]
    assert "Nothing to be done" in snakemake(workflow_copy, target, "-n", "--configfile", "raw.yaml").stdout

    rows = raw.read_text().splitlines()
    raw.write_text("\n".join([rows[0].replace('"question": "', '"question": "Edited: '), *rows[1:]]) + "\n")
    plan = snakemake(workflow_copy, target, "-n", "--configfile", "raw.yaml")
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "data_build" in plan.stdout and "Nothing to be done" not in plan.stdout
    report = audit(target)
    assert any(p.startswith("raw/deepmath.jsonl: content changed since it was used") for p in report.problems), \
        report.problems


def test_sources_digest_follows_content_not_size_or_mtime(tmp_path):
    import os

    from pipeline_lib.core.data.real import sources_digest

    raw = tmp_path / "raw.jsonl"
    raw.write_text('{"question": "What is 7 + 7?"}\n')
    before, stat = sources_digest([str(raw)]), raw.stat()
    raw.write_text('{"question": "What is 8 + 8?"}\n')  # same size
    os.utime(raw, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the old mtime
    assert sources_digest([str(raw)]) != before
    raw.write_text('{"question": "What is 7 + 7?"}\n')
    assert sources_digest([str(raw)]) == before
    assert sources_digest([str(tmp_path / "gone.jsonl")]) != before


@pytest.mark.slow  # one Snakemake build and four dry runs (about 40 CPU s)
def test_a_raw_source_replaced_with_same_size_or_older_content_plans_the_build(workflow_copy):
    """The reported case: a raw file replaced by same-size content with its mtime restored, or by ``cp -p`` of an
    older backup, planned nothing (only the audit noticed)."""
    import os
    import shutil
    import subprocess

    import yaml

    from pipeline_lib.core.config import validate_config
    from tests.conftest import FIXTURES, REPO, real_spec, snakemake

    raw, backup = workflow_copy / "raw/deepmath.jsonl", workflow_copy / "backup/deepmath.jsonl"
    raw.parent.mkdir(), backup.parent.mkdir()
    original = (FIXTURES / "deepmath/train.jsonl").read_text()
    edited = original.replace("Evaluate 7! / 5!.", "Evaluate 8! / 6!.")  # same size: one question, another gold
    assert edited != original and len(edited) == len(original)
    backup.write_text(edited)
    os.utime(backup, (1_600_000_000, 1_600_000_000))  # an older backup
    raw.write_text(original)
    config = validate_config(yaml.safe_load((REPO / "config/config.yaml").read_text()),
                             REPO / "workflow/schemas/config.schema.yaml")
    config["data"]["datasets"]["deepmath"] = real_spec("deepmath") | {"sources": {"main": {
        "hub": "zwhe99/DeepMath-103K", "local": "raw/deepmath.jsonl"}}}
    (workflow_copy / "raw.yaml").write_text(yaml.safe_dump(config))
    target = "results/data/deepmath/rl_test.parquet"

    def plan() -> subprocess.CompletedProcess:
        result = snakemake(workflow_copy, target, "-n", "--configfile", "raw.yaml")
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    built = snakemake(workflow_copy, target, "--cores", "1", "--configfile", "raw.yaml")
    assert built.returncode == 0, built.stderr[-3000:]
    assert "Nothing to be done" in plan().stdout
    stat = raw.stat()
    raw.write_text(edited)
    os.utime(raw, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, mtime restored
    assert raw.stat().st_size == stat.st_size and raw.stat().st_mtime_ns == stat.st_mtime_ns
    replanned = plan()
    assert "data_build" in replanned.stdout and "Nothing to be done" not in replanned.stdout, replanned.stdout[-2000:]
    raw.write_text(original)  # the content it was built from: nothing to do again
    os.utime(raw, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert "Nothing to be done" in plan().stdout
    shutil.copy2(backup, raw)  # cp -p from an older backup
    assert raw.stat().st_mtime < stat.st_mtime
    replanned = plan()
    assert "data_build" in replanned.stdout and "Nothing to be done" not in replanned.stdout, replanned.stdout[-2000:]
