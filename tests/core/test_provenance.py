"""Provenance sidecars and atomic writes."""

import json

import pytest

from pipeline_lib.core.io import atomic_path, sha256_file, write_text
from pipeline_lib.core.provenance import config_digest, write_provenance


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


def test_sidecar_records_the_machine_threads_and_determinism_settings_the_step_ran_with(tmp_path):
    """Which machine made a number: CPU model, torch version, threads, kernels and determinism switches as the
    step had them when it wrote its outputs (the same code gives different floats on another machine)."""
    import torch

    out = tmp_path / "out.txt"
    write_text(out, "result\n")
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        torch.set_num_threads(1)
        torch.use_deterministic_algorithms(True)
        torch.manual_seed(7)
        (sidecar,) = write_provenance([out], step="demo", seeds={"run": 7})
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    record = json.loads(sidecar.read_text())
    host, numerics = record["host"], record["host"]["numerics"]["torch"]
    assert host["cpu_model"] and host["cpu_count"] >= 1 and record["seeds"] == {"run": 7}
    assert numerics["version"] == torch.__version__
    assert numerics["num_threads"] == 1 and numerics["deterministic_algorithms"] is True
    assert numerics["initial_seed"] == 7 and numerics["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


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


def test_a_module_scan_is_reused_only_for_the_same_source(tmp_path):
    """The scan cache (.snakemake/module-scan) is keyed by the module's source: an edited module is scanned again."""
    from pipeline_lib.core import provenance

    module = tmp_path / "m.py"
    module.write_text("import pipeline_lib.core.io\n")
    first = provenance._scan(module, "pipeline_lib.core.m", (1, 1))
    assert first[:2] == (("pipeline_lib.core.io",), ())
    module.write_text("from . import env\nPROMPTS = 'config/prompts'\n")
    second = provenance._scan(module, "pipeline_lib.core.m", (2, 2))
    assert second[:2] == (("pipeline_lib.core", "pipeline_lib.core.env"), ("config/prompts",)) and second[2] != first[2]
    provenance._scan.cache_clear()  # a new process: the answer comes from the cache, for this source only
    assert provenance._scan(module, "pipeline_lib.core.m", (2, 2)) == second
    module.write_text("import pipeline_lib.core.io\n")
    assert provenance._scan(module, "pipeline_lib.core.m", (3, 3)) == first


def test_a_module_digest_is_its_code_not_its_wording(tmp_path):
    """Comments, docstrings and layout change no code digest; a changed operator, constant or name does (issue 58)."""
    from pipeline_lib.core.provenance import code_text

    source = 'def f(x):\n    """Why."""\n    return x * 2  # doubled\n'
    same = ['def f(x):\n    """Another why, longer."""\n    return x * 2\n',
            '"""A module docstring."""\n\n\ndef f(x):\n    # a note\n    return (x\n            * 2)\n',
            'def f(x):\n    return x * 2\n']
    changed = ['def f(x):\n    return x * 3\n', 'def f(x):\n    return x + 2\n', 'def f(y):\n    return y * 2\n',
               'def f(x):\n    """Why."""\n    return "x * 2"\n']
    assert all(code_text(s) == code_text(source) for s in same)
    assert all(code_text(s) != code_text(source) for s in changed)
