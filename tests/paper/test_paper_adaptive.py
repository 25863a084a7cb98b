"""The adaptive-tau evaluation (pipeline_lib.paper.adaptive) on small run directories written here.

Rollouts are made with the real advantage registry (and the tau it reports), evaluations with known per-prompt
scores, so each number the module reports can be checked by hand.
"""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pipeline_lib.core.rl.advantages import advantage_diagnostics, group_advantages
from pipeline_lib.core.stats import paired_interval
from pipeline_lib.core.theory import formulas
from pipeline_lib.paper import adaptive
from tests.conftest import runs_written

TASK = "countdown_tiny"
METHODS = {"softmax_ess": ("softmax_ess", {"ess_fraction": 0.5}), "softmax_exact": ("softmax", {"tau": 0.1}),
           "grpo_exact": ("grpo", {})}
SEEDS = (0, 1, 2)
M, GROUPS, STEPS, PROMPTS = 4, 6, 5, 10


def greedy_scores(method: str, seed: int) -> np.ndarray:
    """Per-prompt greedy scores: the baselines share a pattern; ours solves prompt `seed` more."""
    base = (np.arange(PROMPTS) + seed) % 3 == 0
    scores = base.astype(float)
    if method == "softmax_ess":
        scores[(seed + 1) % PROMPTS] = 1.0
    return scores


def write_eval(root: Path, method: str, seed: int, scores: np.ndarray, samples: int = 2) -> Path:
    path = root / "results/eval" / TASK / method / f"seed{seed}" / "generations.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"prompt_index": i, "mode": "greedy", "sample": 0, "score": float(s)} for i, s in enumerate(scores)]
    lines += [{"prompt_index": i, "mode": "sample", "sample": k, "score": float(s if k == 0 else 0.0)}
              for i, s in enumerate(scores) for k in range(samples)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def write_rollouts(root: Path, method: str, seed: int) -> Path:
    advantage, params = METHODS[method]
    gen = torch.Generator().manual_seed(seed)
    lines = []
    for step in range(1, STEPS + 1):
        pass_rate = torch.rand(GROUPS, 1, generator=gen, dtype=torch.float64)
        rewards = (torch.rand(GROUPS, M, generator=gen, dtype=torch.float64) < pass_rate).double().flatten()
        group = torch.arange(GROUPS).repeat_interleave(M)
        record = {"step": step, "group": group.tolist(), "prompt_index": group.tolist(), "reward": rewards.tolist(),
                  "advantage": group_advantages(advantage, rewards, group, **params).tolist(),
                  "length": torch.randint(1, 20, (GROUPS * M,), generator=gen).tolist(),
                  "correct": rewards.int().tolist(), **advantage_diagnostics(advantage, rewards, group, **params)}
        lines.append(json.dumps(record))
    path = root / "results/train" / TASK / method / f"seed{seed}" / "rollouts.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.fixture
def runs(tmp_path):
    evals = [write_eval(tmp_path, m, s, greedy_scores(m, s)) for m in METHODS for s in SEEDS]
    rollouts = [write_rollouts(tmp_path, m, s) for m in METHODS for s in SEEDS]
    return tmp_path, evals, rollouts


def test_paired_differences_match_hand_computation(runs):
    _, evals, _ = runs
    frame = adaptive.paired_differences(runs_written(evals), "softmax_ess", ["softmax_exact", "grpo_exact"])
    assert set(frame["metric"]) == {"pass@1_greedy", "pass@1_sampled"} and set(frame["baseline"]) == {
        "softmax_exact", "grpo_exact"}
    greedy = frame[frame["metric"] == "pass@1_greedy"].iloc[0]
    # ours solves one extra prompt per seed unless the baseline already solved it: seed 0 -> prompt 1 (new),
    # seed 1 -> prompt 2 ((2 + 1) % 3 == 0: already solved), seed 2 -> prompt 3 (new).
    assert greedy["mean"] == pytest.approx(2 / (len(SEEDS) * PROMPTS))
    assert greedy["ours_mean"] - greedy["baseline_mean"] == pytest.approx(greedy["mean"])
    assert greedy["low"] <= greedy["mean"] <= greedy["high"] and greedy["n_seeds"] == 3 and greedy["n_items"] == 10
    sampled = frame[frame["metric"] == "pass@1_sampled"].iloc[0]
    assert sampled["mean"] == pytest.approx(greedy["mean"] / 2)  # one of two samples carries the greedy score
    # the report's interval, the seed as the unit: the same per-prompt matrices give the same numbers
    direct = paired_interval(np.stack([greedy_scores("softmax_ess", s) for s in SEEDS]),
                             np.stack([greedy_scores(greedy["baseline"], s) for s in SEEDS]))
    assert (greedy["low"], greedy["high"], greedy["method"]) == (pytest.approx(direct.low), pytest.approx(direct.high),
                                                                 "t, seeds + prompts")


def test_identical_methods_differ_by_exactly_zero(tmp_path):
    evals = [write_eval(tmp_path, m, s, greedy_scores("grpo_exact", s)) for m in ("softmax_ess", "grpo_exact")
             for s in SEEDS]
    row = adaptive.paired_differences(runs_written(evals), "softmax_ess", ["grpo_exact"]).iloc[0]
    assert (row["mean"], row["low"], row["high"]) == (0.0, 0.0, 0.0) and not row["excludes_zero"]


def test_unpaired_seeds_and_prompts_are_errors(tmp_path):
    evals = [write_eval(tmp_path, m, s, greedy_scores(m, s)) for m in ("softmax_ess", "grpo_exact") for s in SEEDS]
    with pytest.raises(ValueError, match=r"softmax_ess has seeds \[0, 1, 2\] but grpo_exact has \[0, 1\]"):
        adaptive.paired_differences(runs_written(evals[:-1]), "softmax_ess", ["grpo_exact"])
    evals[-1] = write_eval(tmp_path, "grpo_exact", 2, np.zeros(PROMPTS - 1))
    with pytest.raises(ValueError, match=r"grpo_exact/seed2/generations.jsonl: its greedy scores are not on the same"):
        adaptive.paired_differences(runs_written(evals), "softmax_ess", ["grpo_exact"])


def test_allocation_shares_by_hand(tmp_path):
    """Two equal steps, each two groups of 4 with unit lengths: prompt 0 at k = 1 and prompt 1 at k = 3, so each
    group's prompt has pass rate 0.25 (0.75) over its other visit."""
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 0], dtype=torch.float64)
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    for method, (advantage, params) in METHODS.items():
        for seed in (0, 1):
            path = tmp_path / "results/train" / TASK / method / f"seed{seed}" / "rollouts.jsonl"
            path.parent.mkdir(parents=True)
            path.write_text("".join(json.dumps(
                {"step": step, "group": group.tolist(), "prompt_index": group.tolist(), "reward": rewards.tolist(),
                 "advantage": group_advantages(advantage, rewards, group, **params).tolist(),
                 "length": [1] * 8, "correct": rewards.int().tolist()}) + "\n" for step in (1, 2)))
    frame = adaptive.allocation_comparison(runs_written(sorted(tmp_path.rglob("rollouts.jsonl"))), "softmax_ess",
                                           ["grpo_exact"])
    # softmax_ess, f = 0.5: k = 1 solves ESS = 2 with c from App. A, sum |A| = 2 (4c / (c + 3) - 1);
    # k = 3 is unreachable (nu = 2 <= 3): MaxRL, sum |A| = 2. GRPO's z-scores are symmetric: 50/50.
    c = math.exp(1 / formulas.adaptive_tau(1, 4, 2.0))
    hard = 2 * (4 * c / (c + 3) - 1)
    ours = frame[frame["row"] == "softmax_ess"].iloc[0]
    assert ours["bin1_mean"] == pytest.approx(hard / (hard + 2)) and ours["bin3_mean"] == pytest.approx(2 / (hard + 2))
    grpo = frame[frame["row"] == "grpo_exact"].iloc[0]
    assert grpo["bin1_mean"] == pytest.approx(0.5) and grpo["bin0_mean"] == 0.0
    diff = frame[frame["kind"] == "difference"].iloc[0]
    assert diff["bin1_mean"] == pytest.approx(hard / (hard + 2) - 0.5)
    assert diff["bin1_low"] == pytest.approx(diff["bin1_mean"]) == pytest.approx(diff["bin1_high"])  # equal seeds


def test_tau_data_reads_the_logged_tau_or_recomputes_it(runs, tmp_path):
    _, _, rollouts = runs
    ours = [p for p in rollouts if "softmax_ess" in str(p)]
    logged = adaptive.tau_data(runs_written(ours))
    assert len(logged) == len(SEEDS) * STEPS * GROUPS
    assert set(logged["state"]) <= {"solved", "limit", "no signal"}
    # the state follows the pass rate: all-equal groups have no tau, pass rate >= 0.5 is the tau -> 0 limit
    edge = logged["pass_rate"].isin([0.0, 1.0])
    assert (logged.loc[edge, "state"] == "no signal").all()
    assert (logged.loc[~edge & (logged["pass_rate"] >= 0.5), "state"] == "limit").all()
    solved = logged[logged["state"] == "solved"]
    expected = [formulas.adaptive_tau(round(p * M), M, 2.0) for p in solved["pass_rate"]]
    np.testing.assert_allclose(solved["tau"], expected, rtol=1e-12)
    stripped = tmp_path / "results/train" / TASK / "softmax_ess_verl" / "seed0" / "rollouts.jsonl"
    stripped.parent.mkdir(parents=True)
    stripped.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "tau"}) + "\n"
                                for line in ours[0].read_text().splitlines()))
    recomputed = adaptive.tau_data(runs_written([stripped]), ess_fraction=0.5)
    pd.testing.assert_series_equal(recomputed["tau"], logged[logged["seed"] == 0]["tau"].reset_index(drop=True))
    with pytest.raises(ValueError, match=r"rollouts.jsonl line 1: no 'tau' per rollout.*--ess-fraction"):
        adaptive.tau_data(runs_written([stripped]))


def runs_json(paths: list) -> dict:
    return {path: dataclasses.asdict(run) for path, run in runs_written(paths).items()}


def test_command_line_writes_tables_figure_and_provenance(runs):
    root, evals, rollouts = runs
    stem = root / "results/paper/tables/adaptive_tau"
    stem.parent.mkdir(parents=True)
    assert adaptive.main(["compare", "--eval", json.dumps(runs_json(evals)), "--rollouts",
                          json.dumps(runs_json(rollouts)), "--label", "test", "--stem", str(stem)]) == 0
    table = stem.with_suffix(".md").read_text()
    assert "SoftmaxGRPO-ESS - GRPO-Exact" in table and "SoftmaxGRPO-ESS - SoftmaxGRPO-Exact" in table
    allocation = (stem.parent / "adaptive_tau_allocation.md").read_text()
    assert "[0,0.2)" in allocation and "SoftmaxGRPO-ESS - GRPO-Exact (pp)" in allocation
    assert "| Unbinned |" in allocation and "other visits" in allocation
    assert Path(str(stem.with_suffix(".csv")) + ".prov.json").is_file()
    data = root / "results/paper/data/adaptive_tau.csv"
    data.parent.mkdir(parents=True)
    ours = [str(p) for p in rollouts if "softmax_ess" in str(p)]
    assert adaptive.main(["tau-data", "--rollouts", json.dumps(runs_json(ours)), "--out", str(data)]) == 0
    png, pdf = root / "tau.png", root / "tau.pdf"
    assert adaptive.main(["tau-figure", "--data", str(data), "--label", "test", "--png", str(png),
                          "--pdf", str(pdf)]) == 0
    assert png.stat().st_size > 10_000 and pdf.stat().st_size > 1_000


def test_runs_without_gradient_signal_are_left_out_not_fatal(tmp_path):
    """A very short run (every group all-equal) has no allocation: its rows say so, the other seeds still pair."""
    group = torch.tensor([0, 0, 0, 0])
    for method, (advantage, params) in METHODS.items():
        for seed in (0, 1):
            rewards = torch.tensor([1.0, 0, 0, 0] if seed == 0 else [0.0, 0, 0, 0], dtype=torch.float64)
            path = tmp_path / "results/train" / TASK / method / f"seed{seed}" / "rollouts.jsonl"
            path.parent.mkdir(parents=True)
            path.write_text("".join(json.dumps(  # one prompt, visited twice
                {"step": step, "group": group.tolist(), "prompt_index": [0] * 4, "reward": rewards.tolist(),
                 "advantage": group_advantages(advantage, rewards, group, **params).tolist(),
                 "length": [1] * 4, "correct": rewards.int().tolist()}) + "\n" for step in (1, 2)))
    paths = sorted(tmp_path.rglob("rollouts.jsonl"))
    frame = adaptive.allocation_comparison(runs_written(paths), "softmax_ess", ["grpo_exact"])
    assert set(frame["n_seeds"]) == {1}  # seed 1 left out everywhere, seed 0 kept and paired
    for path in [p for p in paths if p.parent.name == "seed0"]:
        path.unlink()
    frame = adaptive.allocation_comparison(runs_written(sorted(tmp_path.rglob("rollouts.jsonl"))), "softmax_ess",
                                           ["grpo_exact"])
    assert set(frame["n_seeds"]) == {0} and len(frame) == 3  # two share rows and one difference row, all empty
    written = adaptive.allocation_comparison_table(frame, "t", tmp_path / "table")
    assert "GRPO-Exact (pp)" in next(p for p in written if p.suffix == ".md").read_text()
