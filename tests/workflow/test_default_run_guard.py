"""The default run's CPU guard (benchmarks/default_run.py): per-rule CPU seconds against a recorded reference, as
ratios, flagged above 1.10 and never failing. Fixture tables only: nothing here is timed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "default_run.py"


@pytest.fixture(scope="module")
def default_run():
    spec = importlib.util.spec_from_file_location("default_run_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _benchmark(root: Path, relative: str, wall: float, cpu: float) -> None:
    """A Snakemake benchmark file (its real header) at ``root/relative``."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
                    f"{wall}\t0:00:01\t100\t200\t90\t95\t0\t0\t90\t{cpu}\n")


def _run(root: Path) -> None:
    _benchmark(root, "train_local/a/sft/seed0.tsv", 40, 30.0)
    _benchmark(root, "train_local/a/sft/seed1.tsv", 41, 32.0)   # train_local: 62 CPU s over 2 jobs
    _benchmark(root, "eval/a_seed0.tsv", 10, 10.5)              # eval: 10.5 (x1.05 of 10: noise, not flagged)
    _benchmark(root, "paper_new.tsv", 3, 2.0)                   # a rule the reference does not know


def _reference(path: Path) -> None:
    path.write_text("# commit: abc1234\n# machine: fixture, 2 cores\n"
                    "rule\tjobs\tcpu_s\ntrain_local\t2\t50.0\neval\t1\t10.0\npaper_gone\t1\t4.0\n")


def test_compare_flags_rules_over_the_ratio_and_names_new_and_missing_ones(default_run, tmp_path):
    _run(tmp_path / "bench")
    _reference(tmp_path / "ref.tsv")
    by_rule = default_run.summary(default_run.job_table(tmp_path / "bench"))
    reference, header = default_run.read_reference(tmp_path / "ref.tsv")
    assert header == ["commit: abc1234", "machine: fixture, 2 cores"]
    table = default_run.compare(by_rule, reference).set_index("rule")
    assert table.loc["train_local", "ratio"] == pytest.approx(62.0 / 50.0)
    assert table.loc["train_local", "flag"] == "over"
    assert table.loc["eval", "ratio"] == pytest.approx(1.05)
    assert table.loc["eval", "flag"] == ""
    assert table.loc["paper_new", "flag"] == "new" and pd.isna(table.loc["paper_new", "ratio"])
    assert table.loc["paper_gone", "flag"] == "missing" and pd.isna(table.loc["paper_gone", "ratio"])
    # the total covers the rules both runs have: (62 + 10.5) / (50 + 10)
    assert table.loc["total", "ratio"] == pytest.approx(72.5 / 60.0)
    assert table.loc["total", "flag"] == "over"


def test_a_changed_job_count_is_named_and_the_threshold_is_strict(default_run):
    rules = pd.Index(["train_local", "eval"], name="rule")
    by_rule = pd.DataFrame({"jobs": [3, 1], "cpu_s": [30.0, 11.0]}, index=rules)
    reference = pd.DataFrame({"rule": ["train_local", "eval"], "jobs": [2, 1], "cpu_s": [30.0, 10.0]})
    table = default_run.compare(by_rule, reference).set_index("rule")
    assert table.loc["train_local", "flag"] == "jobs"
    assert table.loc["eval", "ratio"] == pytest.approx(1.10)
    assert table.loc["eval", "flag"] == ""   # exactly 1.10 is not over
    assert default_run.compare(by_rule, reference, flag_ratio=1.05).set_index("rule").loc["eval", "flag"] == "over"


def test_record_then_guard_round_trips_and_never_fails(default_run, tmp_path, capsys):
    _run(tmp_path / "bench")
    reference = tmp_path / "reference" / "default_run.tsv"
    assert default_run.main(["--benchmarks", str(tmp_path / "bench"), "--reference", str(reference), "--record"]) == 0
    recorded, header = default_run.read_reference(reference)
    assert recorded.set_index("rule")["cpu_s"].to_dict() == {"eval": 10.5, "paper_new": 2.0, "train_local": 62.0}
    assert any(line.startswith("commit: ") for line in header) and any("cores" in line for line in header)
    capsys.readouterr()
    _benchmark(tmp_path / "bench", "eval/a_seed1.tsv", 10, 10.0)   # eval doubles (and gains a job): flagged, exit 0
    assert default_run.main(["--benchmarks", str(tmp_path / "bench"), "--reference", str(reference)]) == 0
    out = capsys.readouterr().out
    assert "CPU guard: 1 rule(s) over 1.10x the reference: eval\n" in out


def test_no_reference_is_a_note_not_a_failure(default_run, tmp_path, capsys):
    _run(tmp_path / "bench")
    assert default_run.main(["--benchmarks", str(tmp_path / "bench"), "--reference", str(tmp_path / "none.tsv")]) == 0
    assert "CPU guard: no reference at" in capsys.readouterr().out


def test_a_reference_without_its_columns_is_an_error_naming_the_file(default_run, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("rule\tseconds\ntrain_local\t1\n")
    with pytest.raises(ValueError, match=r"bad\.tsv: reference lacks column\(s\) \['cpu_s', 'jobs'\]"):
        default_run.read_reference(bad)
