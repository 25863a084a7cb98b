"""Captions state the settings the run used: each checked against the config (or the data) it comes from."""

import json
from pathlib import Path

import pandas as pd
import yaml

from pipeline_lib.core.config import validate_config
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.paper.ablation import ablation_table
from pipeline_lib.paper.captions import ablation_differences, base_done_records, base_note, paper_gaps
from pipeline_lib.paper.reproduction import build_report, load_scores
from pipeline_lib.plan import plan_runs

REPO = Path(__file__).resolve().parents[2]
REFERENCE = yaml.safe_load((REPO / "config/paper_reference.yaml").read_text())


def load(name: str) -> dict:
    return validate_config(yaml.safe_load((REPO / "config" / name).read_text()),
                           REPO / "workflow/schemas/config.schema.yaml")


def _caption(md: Path) -> str:
    return md.read_text().split("**")[1]


def test_ablation_caption_states_how_its_cells_differ_from_the_main_runs_as_configured(tmp_path):
    frame = pd.DataFrame([{"task": "countdown_tiny", "tau": 0.1, "M": 4, "seed": 0, "pass@1": 0.5, "length": 9.0}])
    for name in ("config.yaml", "paper.yaml"):
        config = load(name)
        ablation, rl = config["train"]["ablation"], config["train"]["rl"]
        stem = tmp_path / name.removesuffix(".yaml")
        ablation_table(frame, "x", stem, ablation_differences(plan_runs(config)))
        caption = _caption(stem.with_suffix(".md"))
        steps = ablation.get("steps")  # unset: the main runs' steps
        main_seeds = ", ".join(map(str, config["train"]["seeds"]))
        if steps is not None and steps != rl["steps"]:
            assert f"steps {steps} (main runs: {rl['steps']})" in caption
        else:
            assert "steps" not in caption
        if ablation["seeds"] != config["train"]["seeds"]:
            assert f"seeds {', '.join(map(str, ablation['seeds']))} (main runs: {main_seeds})" in caption
        assert caption.endswith("Every other setting equals theirs.")
    tiny = load("config.yaml")["train"]
    assert tiny["ablation"]["steps"] != tiny["rl"]["steps"]  # the case the old caption got wrong is exercised


def test_judge_validation_caption_names_programmatic_judges_as_what_they_are(tmp_path):
    from pipeline_lib.paper.judging import validation_table

    judge = load("config.yaml")["judge"]
    cross = {"primary_judge": {"label": judge["primary"]["label"], "kind": judge["primary"]["kind"]},
             "second_judge": {"label": judge["second"]["label"], "kind": judge["second"]["kind"]},
             "methods": [{"method": "softmax_sim", "primary": 60.0, "second": 55.0}],
             "spearman_methods": None, "spearman_methods_note": "one method",
             "spearman_items": 0.5, "spearman_items_note": "", "offset_mean": 5.0}
    (tmp_path / "meeting_tiny.json").write_text(json.dumps(cross))
    (tmp_path / "agreement.json").write_text(json.dumps({"status": "no ratings", "items_in_sample": 30}))
    validation_table([tmp_path / "meeting_tiny.json"], [tmp_path / "agreement.json"], "softmax_sim", "tiny",
                     tmp_path / "val")
    caption = _caption(tmp_path / "val.md")
    assert {judge["primary"]["kind"], judge["second"]["kind"]} == {"programmatic"}
    assert not caption.startswith("LLM-judge") and caption.startswith("Judge validation (programmatic judges;")
    assert f"{judge['primary']['label']} (programmatic)" in caption


def test_claims_quote_the_papers_own_differences_on_every_task():
    gaps = paper_gaps(REFERENCE["table1"], "softmax_sim", "grpo_sim")
    rows = REFERENCE["table1"]["rows"]
    for i, column in enumerate(("GSM8K", "Countdown", "DeepMath")):
        assert f"{rows['softmax_sim'][i] - rows['grpo_sim'][i]:+.1f} {column}" in gaps
    assert gaps == "paper: +7.0 GSM8K, +3.3 Countdown, +1.2 DeepMath"  # the paper's text (Sec. 5), DeepMath included
    table1 = pd.DataFrame([{"task": "countdown_tiny", "method": m, "seed": s, "pass@1_greedy": 0.5}
                           for m in ("softmax_sim", "grpo_sim") for s in range(3)])
    index = pd.RangeIndex(4, name="prompt_index")
    scores = {("countdown_tiny", m, s): {"pass@1_greedy": pd.Series([1.0, 0.0, 1.0, float(m == "softmax_sim")],
                                                                     index=index)}
              for m in ("softmax_sim", "grpo_sim") for s in range(3)}
    claim = next(line for line in build_report("tiny", REFERENCE, table1, None, scores).split("## Claims")[1]
                 .splitlines() if "SoftmaxGRPO-Sim > GRPO-Sim" in line)
    assert "paper: +7.0 GSM8K, +3.3 Countdown, +1.2 DeepMath" in claim


def test_an_untrained_base_beside_the_papers_pretrained_base_carries_a_note(tmp_path):
    from pipeline_lib.core.checkpoint import write_done

    eval_dirs = {}
    for method in ("base", "sft"):
        run = tmp_path / "train/countdown_tiny" / method / "seed0"
        (run / "final").mkdir(parents=True)
        (run / "final/config.json").write_text("{}")
        done = write_done(run, step=0, total_steps=0, config_sha256="x", pretrained=False if method == "base" else None)
        write_provenance([done, run / "final/config.json"], step="train")
        out = tmp_path / "eval/countdown_tiny" / method / "seed0"
        out.mkdir(parents=True)
        (out / "generations.jsonl").write_text(json.dumps({"prompt_index": 0, "mode": "greedy", "score": 0.0}) + "\n")
        (out / "metrics.json").write_text("{}")
        write_provenance([out / "metrics.json"], step="eval", inputs=[run / "final/config.json"])
        eval_dirs[("countdown_tiny", method, 0)] = out
    records = base_done_records(eval_dirs)
    assert list(records) == ["countdown_tiny/base/seed0"]
    assert records["countdown_tiny/base/seed0"]["pretrained"] is False
    table1 = pd.DataFrame([{"task": "countdown_tiny", "method": m, "seed": 0, "pass@1_greedy": 0.0}
                           for m in ("base", "sft")])
    report = build_report("tiny", REFERENCE, table1, None, load_scores(table1, tmp_path / "eval"), base_runs=records)
    table_section = report.split("## Table 1")[1].split("\n## ")[0]
    assert "| Base |" in table_section and base_note(records) in table_section
    assert "`pretrained: false`" in base_note(records)
    assert base_note({"gsm8k/base/seed0": {"pretrained": True}}) is None


def test_report_captions_leave_config_dependent_settings_to_the_tables_own_captions():
    """The Snakemake report's captions are static files: a setting a config can change (the ablation's steps, the
    judges' kind, what Base is) is stated by the table's own caption, which the run writes from its config."""
    ablation, judges, table1 = (" ".join((REPO / "workflow/report" / f"{name}.rst").read_text().split())
                                for name in ("ablation", "judge_validation", "table1"))
    assert "Every other setting equals" not in ablation and "computed from this run's config" in ablation
    assert "only LLM judges make it an LLM-judge validation" in judges
    assert "Base is the untrained, seeded initialisation" in table1
