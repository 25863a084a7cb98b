"""RL-Logit's two reward variants (paper App. B, issue 56 item 5): both trained, Table 1's row selected on the
validation split only, the other variant in the supplementary table."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pipeline_lib.core.data.build import main as build_main
from pipeline_lib.paper import results, variants
from pipeline_lib.plan.runs import RunId
from tests.conftest import REPO, snakemake

TASKS = ("countdown", "gsm8k")
RUNS = {"rl_logit_logprob": "logprob", "rl_logit_neg_perplexity": "neg_perplexity"}
#: Validation favours log-probability on countdown and negative perplexity on gsm8k; the test split says the opposite.
VALIDATION = {("countdown", "rl_logit_logprob"): 0.40, ("countdown", "rl_logit_neg_perplexity"): 0.30,
              ("gsm8k", "rl_logit_logprob"): 0.50, ("gsm8k", "rl_logit_neg_perplexity"): 0.60}
TEST = {("countdown", "rl_logit_logprob"): 0.10, ("countdown", "rl_logit_neg_perplexity"): 0.90,
        ("gsm8k", "rl_logit_logprob"): 0.95, ("gsm8k", "rl_logit_neg_perplexity"): 0.05}


def _write(root: Path, values: dict, sub: str = "") -> dict[str, RunId]:
    files = {}
    for (task, name), value in values.items():
        path = root / task / name / "seed0" / sub / "metrics.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"pass@1_greedy": value, "prompts": 100}))
        files[str(path)] = RunId("baseline", task, name, 0, str(root / task / name / "seed0" / "DONE.json"))
    return files


@pytest.fixture
def evaluated(tmp_path):
    test = _write(tmp_path, TEST)
    validation = _write(tmp_path, VALIDATION, "validation")
    sft = _write(tmp_path, {(task, "sft"): 0.2 for task in TASKS})
    return test, validation, sft


def _select(tmp_path, validation) -> Path:
    out = tmp_path / "rl_logit_selection.json"
    data = {task: f"results/data/{task}/holdout/rl_val.parquet" for task in TASKS}
    variants.main(["select", "--method", "rl_logit", "--validation", json.dumps(_ids(validation)),
                   "--variants", json.dumps(RUNS), "--data", json.dumps(data), "--out", str(out)])
    return out


def _ids(files: dict[str, RunId]) -> dict:
    return {path: run.__dict__ for path, run in files.items()}


def test_the_selection_picks_the_better_validation_variant_and_reads_no_test_metrics(tmp_path, evaluated,
                                                                                   monkeypatch):
    test, validation, _ = evaluated
    real_read = Path.read_text

    def guarded(self, *args, **kwargs):  # a test-split evaluation opened by the selection fails the test
        assert str(self) not in test, f"the selection read the test split's {self}"
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", guarded)
    out = _select(tmp_path, validation)
    monkeypatch.setattr(Path, "read_text", real_read)
    record = json.loads(out.read_text())
    assert {task: r["selected"] for task, r in record["tasks"].items()} == {"countdown": "logprob",
                                                                              "gsm8k": "neg_perplexity"}
    assert record["split_read"] == "validation" and record["test_split_read"] is False
    assert record["files_read"] == sorted(validation) and not set(record["files_read"]) & set(test)
    assert record["validation_data"]["gsm8k"].endswith("holdout/rl_val.parquet")
    assert record["tasks"]["gsm8k"]["variants"]["neg_perplexity"]["validation"] == pytest.approx(0.60)
    sidecar = json.loads(Path(f"{out}.prov.json").read_text())  # its provenance: the validation files, only
    assert sorted(record["path"] for record in sidecar["inputs"]) == sorted(validation)


def test_a_tie_goes_to_the_first_listed_variant_and_a_test_selection_is_refused(tmp_path):
    validation = _write(tmp_path, {("countdown", name): 0.5 for name in RUNS}, "validation")
    record = variants.select("rl_logit", validation, RUNS, {"countdown": "v.parquet"}, "pass@1_greedy")
    assert record["tasks"]["countdown"]["selected"] == "logprob"
    flipped = variants.select("rl_logit", validation, dict(reversed(RUNS.items())), {"countdown": "v.parquet"},
                              "pass@1_greedy")
    assert flipped["tasks"]["countdown"]["selected"] == "neg_perplexity"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**record, "split_read": "test"}))
    with pytest.raises(ValueError, match="selected on 'test'"):
        variants.read_selection(path)


def test_table1_labels_the_selected_variant_and_the_supplementary_table_keeps_the_other(tmp_path, evaluated):
    test, validation, sft = evaluated
    selection = _select(tmp_path, validation)
    csv = tmp_path / "table1.csv"
    results.main(["table1-data", "--runs", json.dumps(_ids({**sft, **test})), "--selection", str(selection),
                  "--out", str(csv)])
    frame = pd.read_csv(csv)
    reported = frame[frame["method"] == "rl_logit"].set_index("task")
    # the test score of the variant validation chose, even where the other variant tests higher
    assert reported.loc["countdown", "pass@1_greedy"] == pytest.approx(0.10)
    assert reported.loc["gsm8k", "pass@1_greedy"] == pytest.approx(0.05)
    assert reported.loc["countdown", "run"] == "rl_logit_logprob"
    assert set(frame["method"]) == {"sft", "rl_logit"}  # the other variant is no Table 1 row
    results.main(["table1", "--data", str(csv), "--label", "tiny", "--stem", str(tmp_path / "table1")])
    table = (tmp_path / "table1.md").read_text()
    assert "RL-Logit (variant selected on validation)" in table
    assert "[log-probability]" in table and "[negative perplexity]" in table
    assert "selected" in table and "rl_logit_variants" in table  # the caption says how and where the rest are
    variants.main(["table", "--selection", str(selection), "--test", json.dumps(_ids(test)), "--label", "tiny",
                   "--stem", str(tmp_path / "rl_logit_variants")])
    supplementary = pd.read_csv(tmp_path / "rl_logit_variants.csv")
    assert len(supplementary) == 4
    chosen = supplementary.set_index(["Task", "Variant"])["In Table 1"]
    assert chosen[("countdown", "log-probability")].startswith("yes")
    assert chosen[("countdown", "negative perplexity")] == "no"
    assert chosen[("gsm8k", "log-probability")] == "no"
    assert "paper reports the best variant without saying how it chose" in (tmp_path / "rl_logit_variants.md"
                                                                              ).read_text()


def test_the_holdout_keeps_the_last_prompts_out_of_training(tmp_path):
    source = tmp_path / "rl_train.parquet"
    pd.DataFrame({"prompt": [f"q{i}" for i in range(10)]}).to_parquet(source)
    build_main(["holdout", "--data", str(source), "--validation-prompts", "3", "--out-dir", str(tmp_path / "h")])
    train, val = (pd.read_parquet(tmp_path / "h" / f"rl_{s}.parquet") for s in ("train", "val"))
    assert list(train["prompt"]) == [f"q{i}" for i in range(7)] and list(val["prompt"]) == ["q7", "q8", "q9"]
    with pytest.raises(ValueError, match="need more than validation_prompts=10"):
        build_main(["holdout", "--data", str(source), "--validation-prompts", "10", "--out-dir", str(tmp_path / "x")])


@pytest.mark.parametrize("configfile,tasks", [("config/config.yaml", ["countdown_tiny"]),
                                              ("config/paper.yaml", ["gsm8k", "countdown", "deepmath"])])
def test_both_variants_are_planned_and_selected_on_validation(workflow_copy, configfile, tasks):
    result = snakemake(workflow_copy, "-n", "--configfile", configfile, full_console=True)
    assert result.returncode == 0, result.stderr[-3000:]
    for task in tasks:
        for name in RUNS:
            assert f"results/train/{task}/{name}/seed0/DONE.json" in result.stdout, (task, name)
            assert f"results/eval/{task}/{name}/seed0/validation/metrics.json" in result.stdout, (task, name)
            assert f"results/eval/{task}/{name}/seed0/metrics.json" in result.stdout, (task, name)
        assert f"results/data/{task}/holdout/rl_val.parquet" in result.stdout
        assert f"results/train/{task}/rl_logit/seed0/DONE.json" not in result.stdout  # no run without a variant
    for output in ("results/paper/data/rl_logit_selection.json", "results/paper/tables/rl_logit_variants.md"):
        assert output in result.stdout
    assert (REPO / "workflow/report/rl_logit_variants.rst").is_file()
