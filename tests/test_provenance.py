"""Provenance sidecars and atomic writes."""

import json

import pytest

from pipeline_lib.io import atomic_path, sha256_file, write_text
from pipeline_lib.provenance import config_digest, write_provenance


def test_sidecar_records_inputs_outputs_code_and_params(tmp_path):
    source = tmp_path / "in.csv"
    source.write_text("a,b\n1,2\n")
    out = tmp_path / "out.txt"
    write_text(out, "result\n")
    (sidecar,) = write_provenance([out], step="demo", inputs=[source], params={"tau": 0.1},
                                  config_sha256="abc", seeds={"run": 3}, started_at=1.0)
    record = json.loads(sidecar.read_text())
    assert sidecar.name == "out.txt.prov.json"
    assert record["step"] == "demo" and record["params"] == {"tau": 0.1} and record["seeds"] == {"run": 3}
    assert record["inputs"][0]["sha256"] == sha256_file(source)
    assert record["inputs"][0]["provenance"].endswith("in.csv.prov.json")
    assert record["outputs"][0]["sha256"] == sha256_file(out)
    assert set(record["code"]) >= {"git_commit", "dirty", "diff_sha256"}
    assert record["software"]["python"]


def test_missing_input_is_named(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("x")
    with pytest.raises(FileNotFoundError, match=r"nope\.csv"):
        write_provenance([out], step="demo", inputs=[tmp_path / "nope.csv"])


def test_config_digest_ignores_key_order():
    assert config_digest({"a": 1, "b": {"c": 2, "d": 3}}) == config_digest({"b": {"d": 3, "c": 2}, "a": 1})
    assert config_digest({"a": 1}) != config_digest({"a": 2})


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "table.csv"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash mid-write")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def test_atomic_write_gives_ordinary_permissions(tmp_path):
    import os

    target = tmp_path / "shared.txt"
    write_text(target, "x")
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
