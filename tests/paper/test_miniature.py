"""The reproduction report's disclosures: the tiny tasks' planted design with the gain split by the blind spot, and
the machines behind the numbers, on data made by the real data code and sidecars made by the real provenance writer."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pipeline_lib.core.data.build import build_tiny
from pipeline_lib.core.data.tiny import BLIND_SPOTS
from pipeline_lib.core.provenance import hardware, write_provenance
from pipeline_lib.paper.machines import MACHINE_NOTE, machines_section, run_machines
from pipeline_lib.paper.miniature import CLAIMS_IT_CANNOT_TEST, load_planted
from pipeline_lib.paper.reproduction import build_report, load_scores

REFERENCE = yaml.safe_load((Path(__file__).parents[2] / "config/paper_reference.yaml").read_text())
SPEC = {"n_train": 40, "n_val": 0, "n_test": 120, "imperfect_fraction": 0.1, "blind_spot_slip": 0.7,
        "numbers_per_task": [3], "max_number": 9, "max_target": 100}


def _write_generations(path: Path, greedy: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"prompt_index": i, "mode": "greedy", "sample": 0, "score": float(s)} for i, s in enumerate(greedy)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (path.parent / "metrics.json").write_text(json.dumps({"pass@1_greedy": float(np.mean(greedy))}))


def _planted_runs(tmp_path: Path) -> tuple[pd.DataFrame, dict, Path]:
    """countdown_tiny data from the data code; SFT fails the blind spot, RL fixes it, other prompts are unchanged."""
    test = next(p for p in build_tiny("countdown_tiny", SPEC, 0, None, tmp_path / "data/countdown_tiny")
                if p.name == "rl_test.parquet")
    blind = np.array([row["blind_spot"] for row in pd.read_parquet(test)["extra_info"]])
    rng, rows = np.random.default_rng(0), []
    for seed in range(3):
        other = (rng.random(len(blind)) < 0.5).astype(float)  # the same draw for both methods: no gain off the spot
        for method, on_spot in (("sft", 0.05), ("grpo_exact", 0.6)):
            greedy = np.where(blind, (rng.random(len(blind)) < on_spot).astype(float), other)
            _write_generations(tmp_path / "eval/countdown_tiny" / method / f"seed{seed}" / "generations.jsonl", greedy)
            rows.append({"task": "countdown_tiny", "method": method, "seed": seed, "pass@1_greedy": greedy.mean()})
    table1 = pd.DataFrame(rows)
    return table1, load_scores(table1, tmp_path / "eval"), test


def test_report_discloses_the_plant_next_to_table1_and_splits_the_gain_by_the_blind_spot(tmp_path):
    table1, scores, test = _planted_runs(tmp_path)
    planted = load_planted({"countdown_tiny": test})
    blind = planted["countdown_tiny"].blind_spot
    numbers = [row["numbers"][0] for row in pd.read_parquet(test)["extra_info"]]
    assert list(blind) == [n <= 4 for n in numbers] and 0 < blind.sum() < len(blind)

    report = build_report("tiny", REFERENCE, table1, None, scores, planted=planted)
    section = report.split("## What the miniature plants")[1].split("\n## ")[0]
    assert report.index("## What the miniature plants") < report.index("## Claims")
    assert report.index("## Table 1") < report.index("## What the miniature plants")
    assert "10% of prompts (`data.tiny.imperfect_fraction`) and on 70% of its blind spot" in section
    assert f"{BLIND_SPOTS['countdown_tiny'].description}: {int(blind.sum())} of the 120 test prompts" in section
    row = next(line for line in section.splitlines() if line.startswith("| countdown_tiny | GRPO-Exact − SFT"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    header = [c.strip() for c in next(line for line in section.splitlines() if line.startswith("| Task")).strip(
        "|").split("|")]
    on_spot, off_spot = cells[header.index("Blind spot: difference [95% CI]")], cells[
        header.index("Other prompts: difference [95% CI]")]
    low, high = (float(x) for x in on_spot.split("[")[1].rstrip("]").split(","))
    assert low > 30 and high < 80  # the planted gain: ~55 points on the blind spot
    assert off_spot.startswith("+0.0 [+0.0, +0.0]")  # the other prompts: identical scores, no gain
    assert cells[header.index("Blind spot: prompts")] == str(int(blind.sum()))
    assert cells[header.index("Other prompts: prompts")] == str(int((~blind).sum()))
    assert all(claim in section for claim in CLAIMS_IT_CANNOT_TEST)


def test_data_without_a_recorded_blind_spot_is_named(tmp_path):
    path = tmp_path / "countdown_tiny" / "rl_test.parquet"
    path.parent.mkdir()
    pd.DataFrame({"extra_info": [{"index": 0, "numbers": [1, 2, 3]}]}).to_parquet(path)
    with pytest.raises(KeyError, match=r"rl_test\.parquet: extra_info has no 'blind_spot'"):
        load_planted({"countdown_tiny": path})
    assert load_planted({"gsm8k": tmp_path / "gsm8k" / "rl_test.parquet"}) == {}  # a real dataset plants nothing


def test_report_names_the_machines_of_training_and_evaluation_from_their_sidecars(tmp_path):
    import torch

    runs = {}
    for method in ("sft", "grpo_exact"):
        final = tmp_path / "train/countdown_tiny" / method / "seed0/final"
        final.mkdir(parents=True)
        (final / "config.json").write_text("{}")
        write_provenance([final / "config.json"], step="train", seeds={"run": 0})
        out = tmp_path / "eval/countdown_tiny" / method / "seed0"
        _write_generations(out / "generations.jsonl", np.ones(4))
        write_provenance([out / "metrics.json"], step="eval_checkpoint", inputs=[final / "config.json"])
        runs[("countdown_tiny", method, 0)] = out
    machines = run_machines(runs)
    assert list(machines["step"]) == ["evaluation", "training"] * 2
    text = "\n".join(machines_section(machines))
    assert hardware()["cpu_model"] in text and torch.__version__ in text and MACHINE_NOTE in text
    row = next(line for line in text.splitlines() if hardware()["cpu_model"] in line)
    assert row.rstrip(" |").endswith("2 | 2") and f"| {torch.get_num_threads()} | False |" in row
    assert "mixes" not in text

    # the same runs, one evaluated on another machine
    sidecar = runs[("countdown_tiny", "grpo_exact", 0)] / "metrics.json.prov.json"
    record = json.loads(sidecar.read_text())
    record["host"]["cpu_model"] = "Other CPU"
    sidecar.write_text(json.dumps(record))
    text = "\n".join(machines_section(run_machines(runs)))
    assert "Other CPU" in text and "This report mixes 2 machines" in text

    report = build_report("tiny", REFERENCE, None, None, machines=run_machines(runs))
    assert "## Machines behind these numbers" in report and MACHINE_NOTE in report


def test_judged_task_gains_are_split_by_its_blind_spot_too(tmp_path):
    """meeting_tiny: the judge's per-item scores (items the judge failed on are missing) split like pass@1."""
    test = next(p for p in build_tiny("meeting_tiny", SPEC, 0, None, tmp_path / "data/meeting_tiny")
                if p.name == "rl_test.parquet")
    planted = load_planted({"meeting_tiny": test})
    blind = planted["meeting_tiny"].blind_spot
    index = blind.index[1:]  # item 0 failed to score in every run
    items = {("meeting_tiny", method, 0): {"judge": pd.Series(np.where(blind[index], low, 0.5), index=index)}
             for method, low in (("sft", 0.2), ("softmax_sim", 0.9))}
    table1, scores, countdown = _planted_runs(tmp_path)  # two tasks, blind spots of different sizes, one table
    planted |= load_planted({"countdown_tiny": countdown})
    section = build_report("tiny", REFERENCE, table1, None, scores, judge_items=items, planted=planted).split(
        "## What the miniature plants")[1].split("\n## ")[0]
    table = [line for line in section.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 2 and len({line.count("|") for line in table}) == 1
    row = next(line for line in section.splitlines() if "SoftmaxGRPO-Sim − SFT" in line)
    assert "| judge score |" in row and "20.0 -> 90.0 | +70.0 (1 seed: no interval)" in row  # one seed: an estimate
    assert "50.0 -> 50.0 | +0.0 (1 seed: no interval)" in row
    assert f"| {int(blind[index].sum())} | 20.0 -> 90.0" in row and "swaps the vote count" in section
