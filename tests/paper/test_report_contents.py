"""The report says only what its run shows: every "cannot say" line and untestable claim is derived from the run's own
files (base models, transfer results, judges, human ratings), a paper-labelled report carries no sentence written for
the miniature, and a miniature's notice comes before the Summary (issue 56 item 7)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pipeline_lib.paper.contents import RunContents, cannot_say, run_contents
from pipeline_lib.paper.miniature import CLAIMS_IT_CAN_TEST, CLAIMS_IT_CANNOT_TEST, Planted
from pipeline_lib.paper.reproduction import build_report

REFERENCE = yaml.safe_load((Path(__file__).parents[2] / "config/paper_reference.yaml").read_text())

#: Sentences the report once printed for every run, true only of the miniature (issue 56's reviewer list), and words
#: no paper-labelled report may hold.
MINIATURE_ONLY = ("one model size here", "no transfer benchmarks in a miniature run",
                  "programmatic judges and no human ratings", "Gains grow with model scale", "tau 0.1-0.5",
                  "(0.1-0.5)", "does not depend on model size", "depends on model size", "miniature", "tiny",
                  "planted", "under a million parameters", *CLAIMS_IT_CANNOT_TEST, *CLAIMS_IT_CAN_TEST)


def _table1(seeds: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame([{"task": task, "method": method, "seed": seed, "pass@1_greedy": rng.random()}
                         for task in ("gsm8k", "countdown") for method in ("sft", "grpo_exact", "softmax_exact")
                         for seed in range(seeds)])


def _run_files(root: Path, models: list[str], benchmarks: list[str], kind: str, rated: int) -> dict:
    """A run's own files as the paper plan writes them: scale data, transfer results, judge summaries, calibrations."""
    root.mkdir(parents=True, exist_ok=True)
    scale = root / "scale.csv"
    pd.DataFrame([{"task": "gsm8k", "model": m, "method": "grpo_exact", "seed": 0, "pass@1": 0.5}
                  for m in models]).to_csv(scale, index=False)
    transfer = []
    if "lm_eval" in benchmarks:
        transfer.append(root / "lm_eval.json")
        transfer[-1].write_text(json.dumps({"harness": "lm_eval", "results": {
            "mmlu": {"acc,none": 0.6}, "gpqa_main_zeroshot": {"acc,none": 0.25}}}))
    if "alpaca_eval" in benchmarks:
        transfer.append(root / "alpaca_eval.json")
        transfer[-1].write_text(json.dumps({"harness": "alpaca_eval", "results": {"length_controlled_winrate": 2.5}}))
    summaries, agreements = [], []
    for task in ("poetry", "meetingbank"):
        summary = root / "judge" / task / "summary.json"
        summary.parent.mkdir(parents=True)
        summary.write_text(json.dumps({"judge": {"kind": kind, "label": f"{kind} judge"}, "rubric": task}))
        summaries.append(str(summary))
        agreement = root / "calibration" / task / "agreement.json"
        agreement.parent.mkdir(parents=True)
        agreement.write_text(json.dumps({"status": "rated", "items_in_sample": 30, "items_compared": rated}
                                        if rated else {"status": "no ratings", "items_in_sample": 30}))
        agreements.append(agreement)
    return {"scale_data": scale, "transfer": [str(p) for p in transfer], "judge_summaries": summaries,
            "agreements": agreements}


def _made(root: Path) -> dict[str, Path]:
    made = {}
    for name in ("nonverifiable", "judge_validation", "ablation", "scale"):
        made[name] = root / f"{name}.md"
        made[name].write_text(f"| {name} |\n|---|\n| 1 |")
    return made


def test_run_contents_are_read_from_the_runs_own_files(tmp_path):
    full = run_contents(**_run_files(tmp_path / "full", ["Qwen2.5-1.5B", "Qwen2.5-3B"],
                                     ["lm_eval", "alpaca_eval"], "llm", 30))
    assert full.models == ("Qwen2.5-1.5B", "Qwen2.5-3B") and full.transfer == ("MMLU", "GPQA", "AlpacaEval 2.0")
    assert full.judges == (("llm judge", "llm"),) and full.human_rated == {"poetry": 30, "meetingbank": 30}
    assert cannot_say(full, judged=True) == []
    bare = run_contents(**_run_files(tmp_path / "bare", ["Qwen2.5-1.5B"], ["lm_eval"], "programmatic", 0))
    lines = cannot_say(bare, judged=True)
    assert len(lines) == 4
    assert "one base model (Qwen2.5-1.5B)" in lines[0] and "persists at a second model size (App. B.2" in lines[0]
    assert lines[1] == "transfer: no AlpacaEval 2.0 results in this run"
    assert "programmatic judge (programmatic), not an LLM" in lines[2]
    assert "no human ratings compared with it in this run (meetingbank, poetry)" in lines[3]
    assert cannot_say(RunContents(), judged=False) == [
        "whether the SoftmaxGRPO advantage persists at a second model size (App. B.2, 1.5B and 3B): no model-scale "
        "study in this run", "transfer: no MMLU, GPQA, AlpacaEval 2.0 results in this run"]


@pytest.mark.parametrize("complete", [True, False])
def test_a_paper_labelled_report_carries_no_sentence_written_for_the_miniature(tmp_path, complete):
    """Built from synthetic inputs: with every model, benchmark, LLM judge and human rating the paper's appendix
    claims rest on, the report says nothing is missing; with some missing it names exactly those, from the files."""
    files = (_run_files(tmp_path, ["Qwen2.5-1.5B", "Qwen2.5-3B"], ["lm_eval", "alpaca_eval"], "llm", 30) if complete
             else _run_files(tmp_path, ["Qwen2.5-1.5B"], ["lm_eval"], "llm", 0))
    contents = run_contents(**files)
    judge_items = {(task, method, seed): {"judge": pd.Series([0.5, 0.6], index=pd.RangeIndex(2, name="prompt_index"))}
                   for task in ("poetry", "meetingbank") for method in ("grpo_sim", "softmax_sim") for seed in range(3)}
    report = build_report("paper", REFERENCE, _table1(), None, judge_items=judge_items, made=_made(tmp_path),
                          contents=contents)
    for sentence in MINIATURE_ONLY:
        assert sentence.lower() not in report.lower(), sentence
    ledger = report.split("## Claims")[1]
    assert "The SoftmaxGRPO advantage over GRPO persists at 3B (App. B.2, paper: +2.1 gsm8k, +9.5 countdown; two " \
           "model sizes, not read as a scaling law)" in ledger
    assert "tau <= 0.3 gives the best observed accuracy-stability trade-off in the tau x M sweep" in ledger
    summary = report.split("## Summary")[1].split("\n## ")[0]
    if complete:
        assert "What this run cannot say" not in summary
        assert "2 model sizes in this run (Qwen2.5-1.5B, Qwen2.5-3B)" in ledger
        assert "60 rated items compared on meetingbank, poetry" in ledger and "cannot test" not in ledger
    else:
        cannot = summary.split("What this run cannot say:")[1]
        assert "one base model (Qwen2.5-1.5B) in this run" in cannot
        assert "Transfer: no AlpacaEval 2.0 results in this run" in cannot
        assert "no human ratings compared with it in this run" in cannot
        assert "not an LLM" not in cannot  # the judges here are LLMs
        assert "| one base model (Qwen2.5-1.5B) in this run |" in ledger
        assert "| MMLU, GPQA in" in ledger and "no AlpacaEval 2.0 results" in ledger


def test_a_miniature_report_gives_its_notice_before_the_summary(tmp_path):
    """The run label's paragraph (that this is a miniature) precedes the Summary's verdicts; the planted tasks'
    limits and the contents-derived gaps are both in the Summary."""
    blind = pd.Series([True, False], index=pd.RangeIndex(2, name="prompt_index"))
    planted = {"arith_tiny": Planted("arith_tiny", blind, {"imperfect_fraction": 0.1, "blind_spot_slip": 0.9})}
    table1 = _table1().assign(task=lambda f: f["task"].map({"gsm8k": "arith_tiny", "countdown": "countdown_tiny"}))
    report = build_report("tiny", REFERENCE, table1, None, planted=planted, contents=RunContents())
    notice = report.index("This is a miniature run")
    assert notice < report.index("## Summary") < report.index("## Table 1")
    summary = report.split("## Summary")[1].split("\n## ")[0]
    assert "these tasks are synthetic prompts with a planted error" in summary and "(`arith_tiny`)" in summary
    assert "no model-scale study in this run" in summary and "Transfer: no MMLU, GPQA, AlpacaEval 2.0" in summary
