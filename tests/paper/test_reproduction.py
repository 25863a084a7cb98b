"""The reproduction report's paired differences, allocation shift and claim ledger, on hand-made runs."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from pipeline_lib.core.rl.advantages import group_advantages
from pipeline_lib.core.stats import paired_interval
from pipeline_lib.paper.allocation_split import ALLOCATION_CLAIMS, allocation_split
from pipeline_lib.paper.reproduction import allocation_shift, build_report, compare, load_judge_items, load_scores
from pipeline_lib.paper.results import allocation_data
from pipeline_lib.paper.verdicts import verdicts
from pipeline_lib.plan import RunId
from tests.conftest import REPO, runs_written

REFERENCE = yaml.safe_load((Path(__file__).parents[2] / "config/paper_reference.yaml").read_text())


def _write_generations(path: Path, greedy: list[float], sampled: list[list[float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"prompt_index": i, "mode": "greedy", "sample": 0, "score": s} for i, s in enumerate(greedy)]
    lines += [{"prompt_index": i, "mode": "sample", "sample": k, "score": s}
              for i, row in enumerate(sampled) for k, s in enumerate(row)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_paired_difference_reads_generations_and_detects_a_real_gain(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(3):
        for method, p in (("sft", 0.3), ("grpo_exact", 0.6), ("softmax_exact", 0.6)):
            greedy = (rng.random(100) < p).astype(float).tolist()
            sampled = (rng.random((100, 4)) < p).astype(float).tolist()
            _write_generations(tmp_path / "countdown_tiny" / method / f"seed{seed}" / "generations.jsonl",
                               greedy, sampled)
            rows.append({"task": "countdown_tiny", "method": method, "seed": seed, "pass@1_greedy": np.mean(greedy)})
    table1 = pd.DataFrame(rows)
    scores = load_scores(table1, tmp_path)
    gain = compare(scores, "countdown_tiny", "grpo_exact", "sft", "pass@1_sampled").result
    assert gain.n_seeds == 3 and gain.n_items == 100 and gain.low > 0.15
    tie = compare(scores, "countdown_tiny", "softmax_exact", "grpo_exact", "pass@1_greedy").result
    assert tie.low < 0 < tie.high
    report = build_report("tiny", REFERENCE, table1, None, scores)
    assert "SoftmaxGRPO-Exact − GRPO-Exact" in report
    ledger = report.split("## Claims")[1]
    assert "| supported |" in ledger and "| inconclusive (interval includes 0) |" in ledger
    assert "reproduced" not in ledger  # "not reproduced" for an interval including 0 said more than it carries
    assert "Verdict rules: a claim is *supported* only when" in ledger and "Holm" in ledger
    assert "Intervals are 95% t-intervals with the training seed as the unit" in report
    assert "Δ" not in report.split("## Table 1")[1]
    differences = report.split("### Paired differences")[1].split("## Claims")[0]
    assert differences.count("| t, seeds + prompts |") == 6  # 3 pairs x 2 metrics: every interval names its method


def test_allocation_shift_is_paired_by_seed_and_made_tables_are_recognised(tmp_path):
    frame = pd.DataFrame([{"task": "arith_tiny", "method": m, "seed": s, "bin0": hard, "bin1": 0.0, "bin2": 0.0,
                           "bin3": 0.0, "bin4": 1.0 - hard}
                          for s in range(3) for m, hard in (("grpo_exact", 0.1 + 0.01 * s), ("softmax_exact", 0.4))])
    near, moderate = allocation_shift(frame)  # arith_tiny stands in for GSM8K: the paper's two statements there
    assert near["claim"].name == "p >= 0.9" and not near["claim"].more
    # "less on p >= 0.9" is oriented GRPO - SoftmaxGRPO: a positive difference is what the paper states
    assert abs(near["result"].mean - (0.89 - 0.6)) < 1e-9 and near["result"].excludes_zero
    assert near["b_share"] == pytest.approx(0.89) and near["a_share"] == pytest.approx(0.6)
    assert moderate["claim"].name == "0.2 <= p < 0.9" and moderate["result"].mean == 0.0
    with_paper = allocation_shift(frame, REFERENCE["gradient_allocation"])
    assert with_paper[0]["paper_b"] == pytest.approx(0.364) and with_paper[1]["paper_a"] == pytest.approx(0.827)
    table = tmp_path / "nonverifiable.md"
    table.write_text("| Method | meeting_tiny |\n|---|---|\n| SFT | 50.0 |")
    ablation = tmp_path / "ablation.md"
    ablation.write_text("| tau | countdown_tiny M=4 pass@1 |\n|---|---|\n| 0.1 | 30.0% |")
    report = build_report("tiny", REFERENCE, None, frame, made={"nonverifiable": table, "ablation": ablation})
    assert "Made by this run" in report.split("## nonverifiable")[1].split("##")[0]
    assert "Not reproduced" in report.split("## scale")[1]
    # our one ablation table stands for the paper's two sweep tables: shown once, naming both
    assert report.count("| 0.1 | 30.0% |") == 1
    assert "## ablation (the paper's ablation_gsm8k, ablation_countdown)" in report


def test_judge_items_from_score_files_pair_by_item_and_reach_the_report(tmp_path):
    """The primary judge's ``scores.jsonl`` read as the report reads them: a failed item is left out (as in the
    table, never a 0), the items every run scored pair across methods, and the comparison reaches the report."""
    summaries = []
    for method, score in (("sft", 40.0), ("grpo_sim", 50.0), ("softmax_sim", 70.0)):
        run = tmp_path / "judge/primary/meeting_tiny" / method / "seed0"
        run.mkdir(parents=True)
        records = [{"prompt_index": i, "score_100": score + i % 3} for i in (2, 0, 1, 3, 4, 5)]
        records.append({"prompt_index": 6 if method == "sft" else 5, "failed": True, "reason": "unparseable"})
        records = [r for r in records if r.get("failed") or r["prompt_index"] != (6 if method == "sft" else 5)]
        (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        (run / "summary.json").write_text('{"rubric": "meetingbank"}')  # its scale: where unscored items count
        summaries.append(run / "summary.json")
    items = load_judge_items(runs_written(summaries))
    sft = items[("meeting_tiny", "sft", 0)]["judge"]
    assert list(sft.index) == [0, 1, 2, 3, 4, 5] and sft[2] == 0.42
    assert compare(items, "meeting_tiny", "softmax_sim", "sft", "judge").note == "different test prompts"
    result = compare(items, "meeting_tiny", "softmax_sim", "sft", "judge", shared_items=True).result
    assert result.n_items == 5 and abs(result.mean - 0.3) < 1e-9
    table = tmp_path / "nonverifiable.md"
    table.write_text("| Method | meeting_tiny |\n|---|---|\n| SFT | 41.0 |")
    report = build_report("tiny", REFERENCE, None, None, judge_items=items, made={"nonverifiable": table})
    assert "SoftmaxGRPO-Sim − GRPO-Sim" in report.split("## nonverifiable")[1].split("## ")[0]


def _runs(tmp_path: Path, seeds: int, gain: float) -> tuple[pd.DataFrame, dict]:
    rng = np.random.default_rng(seeds)
    rows = []
    for seed in range(seeds):
        for method, p in (("sft", 0.3), ("grpo_exact", 0.3 + gain)):
            greedy = (rng.random(200) < p).astype(float).tolist()
            _write_generations(tmp_path / "arith_tiny" / method / f"seed{seed}" / "generations.jsonl", greedy,
                               [[g] for g in greedy])
            rows.append({"task": "arith_tiny", "method": method, "seed": seed, "pass@1_greedy": np.mean(greedy)})
    table1 = pd.DataFrame(rows)
    return table1, load_scores(table1, tmp_path)


def test_one_seed_per_method_gives_estimates_and_no_verdicts(tmp_path):
    """The paper plan runs one seed per method: however large the gain, the claims table holds estimates only."""
    table1, scores = _runs(tmp_path, 1, 0.5)
    report = build_report("paper", REFERENCE, table1, None, scores)
    ledger = report.split("## Claims")[1]
    assert "| no verdict: estimate from 1 seed (< 3) |" in ledger
    assert "supported" not in ledger.split("|---")[1] and "contradicted" not in ledger.split("|---")[1]
    assert "(1 seed: no interval)" in report.split("### Paired differences")[1]
    more, scores = _runs(tmp_path / "five", 5, 0.5)
    assert "| supported |" in build_report("tiny", REFERENCE, more, None, scores, min_seeds=5)
    short = build_report("tiny", REFERENCE, more, None, scores, min_seeds=6).split("## Claims")[1]
    assert "estimate from 5 seeds (< 6)" in short and "No claim here has the 6 seeds a verdict needs" in short
    assert "No claim here" not in build_report("tiny", REFERENCE, more, None, scores, min_seeds=5)


def test_verdict_rules():
    up = paired_interval([0.30, 0.32, 0.34], [0.0, 0.0, 0.0])
    down = paired_interval([0.0, 0.0, 0.0], [0.30, 0.32, 0.34])
    wide = paired_interval([0.3, -0.2, 0.1], [0.0, 0.0, 0.0])
    two_seeds = paired_interval([0.30, 0.32], [0.0, 0.0])
    texts = [v.text for v in verdicts([up, down, wide, two_seeds, None])]
    assert texts == ["supported", "contradicted (interval excludes 0 the other way)",
                     "inconclusive (interval includes 0)", "no verdict: estimate from 2 seeds (< 3)",
                     "cannot test (no paired result)"]
    # Holm: an interval that excludes 0 on its own (p ~ 0.03) is not enough among several tested claims
    edge = paired_interval([0.10, 0.16, 0.22], [0.0, 0.0, 0.0], level=0.95)
    assert edge.excludes_zero and 0.01 < edge.p_value < 0.05
    alone, crowded = verdicts([edge])[0], verdicts([edge, wide, wide])[0]
    assert alone.text == "supported" and crowded.text == "inconclusive (interval excludes 0, but not after Holm)"
    assert crowded.adjusted_p == pytest.approx(min(1.0, 3 * edge.p_value))
    with pytest.raises(ValueError, match="min_seeds must be >= 3"):
        verdicts([up], min_seeds=2)


def test_the_allocation_section_shows_every_bin_and_the_unbinned_budget():
    """Every bin beside the paper's (the [0.9, 1] bin too: p is measured over other visits, so it can hold gradient),
    the budget no other visit could bin beside them, and how p is measured; the paper's four statements reach the
    claims table with the paper's own shares, summed from its table."""
    frame = pd.DataFrame([{"task": "arith_tiny", "method": m, "seed": s, "bin0": 1.0, "bin1": 2.0, "bin2": 3.0,
                           "bin3": 4.0, "bin4": 10.0 if m == "grpo_exact" else 2.0 + 0.1 * s, "unbinned": 5.0,
                           "groups": 40, "groups_unbinned": 4}
                          for s in range(3) for m in ("grpo_exact", "softmax_exact")])
    report = build_report("tiny", REFERENCE, None, frame)
    section = report.split("## Gradient allocation")[1].split("###")[0]
    assert "| 50.0 / 36.4 |" in section  # 3 seeds x 10 of 3 x 20 binned, beside the paper's GRPO [0.9, 1]
    assert "| 20.0% (12/120 groups) |" in section and "other visits" in section
    claims = report.split("## Claims")[1]
    assert "GRPO-Exact on prompts with p >= 0.9 (Table 3); paper 36.4% -> 10.0%" in claims
    assert "GRPO-Exact on prompts with 0.2 <= p < 0.9 (Table 3); paper 58.9% -> 82.7%" in claims
    assert [c.name for c in ALLOCATION_CLAIMS] == ["p >= 0.9", "0.2 <= p < 0.9", "p < 0.5", "p >= 0.9"]


def _write_rl_run(root: Path, method: str, seed: int, rewards: torch.Tensor, advantage: str, params: dict) -> None:
    """``rewards`` [steps, prompts * 8]: each step visits every prompt once (group g answers prompt g)."""
    run = root / "arith_tiny" / method / f"seed{seed}"
    run.mkdir(parents=True)
    lines = []
    for step, step_rewards in enumerate(rewards, start=1):
        group = torch.arange(len(step_rewards) // 8).repeat_interleave(8)
        lines.append(json.dumps({"step": step, "group": group.tolist(), "prompt_index": group.tolist(),
                                 "reward": step_rewards.tolist(), "correct": step_rewards.int().tolist(),
                                 "advantage": group_advantages(advantage, step_rewards, group, **params).tolist(),
                                 "length": (torch.arange(len(step_rewards)) % 5 + 1).tolist()}) + "\n")
    (run / "rollouts.jsonl").write_text("".join(lines))
    spec = {"advantage": advantage, "advantage_params": params}
    (run / "DONE.json.prov.json").write_text(json.dumps({"params": {"spec": spec}}))


def test_allocation_split_adds_up_and_holds_visits_fixed(tmp_path):
    """The split's two parts add up to the shift the report computes from the allocation data, and re-weighting
    GRPO's own rollouts is what the arithmetic part measures (visits = 0 when both runs saw the same groups)."""
    gen = torch.Generator().manual_seed(0)
    rollouts: dict[str, RunId] = {}
    for seed in range(3):
        pass_rate = torch.rand(1, 6, 1, generator=gen, dtype=torch.float64)
        grpo = (torch.rand(4, 6, 8, generator=gen, dtype=torch.float64) < pass_rate).double().flatten(1)
        softmax = (torch.rand(4, 6, 8, generator=gen, dtype=torch.float64) < pass_rate * 0.8).double().flatten(1)
        _write_rl_run(tmp_path, "grpo_exact", seed, grpo, "grpo", {})
        _write_rl_run(tmp_path, "softmax_exact", seed, softmax, "softmax", {"tau": 0.1})
        rollouts |= {str(tmp_path / "arith_tiny" / m / f"seed{seed}" / "rollouts.jsonl"):
                     RunId("main", "arith_tiny", m, seed, f"arith_tiny/{m}/seed{seed}/DONE.json")
                     for m in ("grpo_exact", "softmax_exact")}
    shifts = allocation_shift(allocation_data(rollouts))
    assert [s["claim"].name for s in shifts] == ["p >= 0.9", "0.2 <= p < 0.9"]  # arith_tiny stands in for GSM8K
    for shift in shifts:  # the split is SoftmaxGRPO - GRPO; the shift is oriented as the paper states it
        split = allocation_split(rollouts, [("arith_tiny", shift["claim"])]).set_index("part")["result"]
        sign = 1 if shift["claim"].more else -1
        assert split["arithmetic"].mean + split["visits"].mean == pytest.approx(sign * shift["result"].mean)
        assert split["arithmetic"].n_seeds == 3 and split["arithmetic"].method == "t, seeds"
    claim = shifts[1]["claim"]
    split = allocation_split(rollouts, [("arith_tiny", claim)]).set_index("part")["result"]
    assert split["arithmetic"].mean != 0  # the softmax weights move budget across bins of the same rollouts
    same = tmp_path / "same"
    for seed in range(3):
        lines = (tmp_path / "arith_tiny/grpo_exact" / f"seed{seed}" / "rollouts.jsonl").read_text().splitlines()
        rewards = torch.tensor([json.loads(line)["reward"] for line in lines], dtype=torch.float64)
        _write_rl_run(same, "grpo_exact", seed, rewards, "grpo", {})
        _write_rl_run(same, "softmax_exact", seed, rewards, "softmax", {"tau": 0.1})
    held = allocation_split({str(same / Path(path).relative_to(tmp_path)): run for path, run in rollouts.items()},
                            [("arith_tiny", claim)]).set_index("part")["result"]
    assert held["visits"].mean == 0.0 and held["arithmetic"].mean == pytest.approx(split["arithmetic"].mean)
    report = build_report("tiny", REFERENCE, None, allocation_data(rollouts), rollouts=rollouts)
    assert "estimator's arithmetic: GRPO-Exact's own rollouts" in report.split("### Where the shift comes from")[1]


def test_the_advantage_of_a_verl_run_is_read_from_its_run_spec(tmp_path):
    """A verl run's provenance records its RunSpec: the estimator and its parameters, tau among them."""
    from pipeline_lib.paper.allocation_split import run_advantage
    from pipeline_lib.plan import Estimator, RunSpec

    spec = RunSpec(method="softmax_exact", task="gsm8k", engine="verl", estimator=Estimator("softmax", {"tau": 0.3}))
    (tmp_path / "DONE.json.prov.json").write_text(json.dumps({"params": {"spec": spec.to_dict()}}))
    assert run_advantage(tmp_path) == ("softmax", {"tau": 0.3})


def _report_with_claims(path, verdicts: list[str]):
    rows = "\n".join(f"| Claim {i} | arith_tiny | greedy pass@1 +1.0 [+0.5, +1.5] (t, seeds + prompts) points | 3 "
                     f"| 0.01 | {verdict} |" for i, verdict in enumerate(verdicts))
    header = "| Claim | Task | Evidence | Seeds | Holm-adjusted p | Verdict |\n|---|---|---|---|---|---|"
    path.write_text(f"# Report\n\n## Claims\n\nVerdict rules: ...\n\n{header}\n{rows}\n\n## Machines\n\n| a | b |\n")
    return path


def test_the_fresh_seed_check_fails_when_a_positive_verdict_does_not_hold_again(tmp_path, capsys):
    """benchmarks/replicate_verdicts.py: a supported claim that comes out inconclusive on fresh seeds fails the check;
    inconclusive claims are not judged; a report without the table is an error naming the file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("replicate_verdicts", REPO / "benchmarks/replicate_verdicts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    default = _report_with_claims(tmp_path / "default.md", ["supported", "inconclusive (interval includes 0)"])
    same = _report_with_claims(tmp_path / "same.md", ["supported", "contradicted"])
    lost = _report_with_claims(tmp_path / "lost.md", ["inconclusive (interval excludes 0, but not after Holm)",
                                                      "supported"])
    assert module.main(["--default", str(default), "--fresh", str(same)]) == 0
    assert "1 of 1 positive verdicts" in capsys.readouterr().out
    assert module.main(["--default", str(default), "--fresh", str(lost)]) == 1
    assert "DOES NOT REPLICATE" in capsys.readouterr().out
    (tmp_path / "empty.md").write_text("# Report\n")
    with pytest.raises(SystemExit, match=r"empty\.md: no '## Claims' section"):
        module.main(["--default", str(default), "--fresh", str(tmp_path / "empty.md")])


def _write_tiny_run(root: Path, seeds: list[int], rng: np.random.Generator) -> Path:
    """A results tree with the files benchmarks/verdict_stability.py pools: per-prompt generations, table1.csv and
    gradient_allocation.csv. RL beats SFT by 60 points, SoftmaxGRPO ties GRPO, the allocation shift is +20 points."""
    rows, allocation = [], []
    for seed in seeds:
        for method, p in (("sft", 0.2), ("grpo_exact", 0.8), ("softmax_exact", 0.8), ("grpo_sim", 0.8),
                          ("softmax_sim", 0.8)):
            greedy = (rng.random(200) < p).astype(float).tolist()
            _write_generations(root / "eval/countdown_tiny" / method / f"seed{seed}" / "generations.jsonl", greedy, [])
            rows.append({"task": "countdown_tiny", "method": method, "seed": seed, "pass@1_greedy": np.mean(greedy)})
        for method, hard in (("grpo_exact", 0.5), ("softmax_exact", 0.7 + 0.01 * rng.standard_normal())):
            allocation.append({"task": "countdown_tiny", "method": method, "seed": seed, "bin0": hard,
                               "bin1": 0.0, "bin2": 0.9 - hard, "bin3": 0.0, "bin4": 0.1})
    (root / "paper/data").mkdir(parents=True)
    pd.DataFrame(rows).to_csv(root / "paper/data/table1.csv", index=False)
    pd.DataFrame(allocation).to_csv(root / "paper/data/gradient_allocation.csv", index=False)
    return root


def test_verdict_stability_counts_verdicts_over_seed_subsets_and_their_replication(tmp_path, capsys):
    """benchmarks/verdict_stability.py pools runs on disjoint seeds, gives each claim's verdict shares over subsets
    of n seeds and how often a report's positive verdicts hold on a disjoint subset; a run that two trees hold with
    different scores is an error naming the tree."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("verdict_stability", REPO / "benchmarks/verdict_stability.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(0)
    first = _write_tiny_run(tmp_path / "a", [0, 1, 2], rng)
    second = _write_tiny_run(tmp_path / "b", [3, 4, 5], rng)
    assert module.main(["--results", str(first), str(second), "--sizes", "3", "6"]) == 0
    out = capsys.readouterr().out
    assert "pooled seeds: [0, 1, 2, 3, 4, 5]" in out and "n = 3 seeds, 20 subsets" in out
    lines = out.splitlines()
    assert "supported 100%" in next(x for x in lines if "RL with the verifier improves" in x)
    assert "inconclusive 100%" in next(x for x in lines if "SoftmaxGRPO-Exact >= GRPO-Exact" in x)
    assert "supported 100%" in next(x for x in lines if "gradient budget" in x)
    assert "disjoint pairs: 20;" in out and "every positive verdict holds on the other subset: 100%" in out
    assert "no two disjoint subsets of 6 among 6 seeds" in out
    clash = _write_tiny_run(tmp_path / "c", [2], rng)
    with pytest.raises(SystemExit, match=r"/c: run \('countdown_tiny', '\w+', 2\) differs"):
        module.main(["--results", str(first), str(clash)])
    import shutil

    shifted = Path(shutil.copytree(first, tmp_path / "d"))  # the same scores, another allocation share
    allocation = pd.read_csv(shifted / "paper/data/gradient_allocation.csv")
    allocation.loc[allocation["method"] == "softmax_exact", "bin0"] += 0.1
    allocation.to_csv(shifted / "paper/data/gradient_allocation.csv", index=False)
    with pytest.raises(SystemExit, match=r"different gradient-allocation rows"):
        module.main(["--results", str(first), str(shifted)])


def test_report_opens_with_a_summary_and_names_the_rows_that_are_artefacts(tmp_path):
    """The report's first section says what was run, what holds (the claims table's own verdicts) and what a
    miniature cannot say; Rationalization's malformed demonstrations, a judge blind to the planted slip and the
    gradient budget no other visit could bin are stated from the run's files, each where its row is."""
    from pipeline_lib.paper.miniature import Planted

    table1, scores = _runs(tmp_path / "eval", 3, 0.5)
    table1 = pd.concat([table1, pd.DataFrame([{"task": "arith_tiny", "method": "rationalization", "seed": s,
                                               "pass@1_greedy": 0.005} for s in range(3)])], ignore_index=True)
    good, bad = "<think>2 + 3 = 5</think>\n<answer>5</answer>", "5 5 5 <answer>5</answer>"
    demonstrations = {}
    for seed in range(3):  # 3 of 40 demonstrations well-formed
        run = tmp_path / "train/arith_tiny/rationalization" / f"seed{seed}"
        demonstrations[str(run / "rationalized_sft.parquet")] = RunId("main", "arith_tiny", "rationalization", seed,
                                                                      str(run / "DONE.json"))
        run.mkdir(parents=True)
        demos = [good] + [bad] * (13 if seed == 0 else 12)
        pd.DataFrame({"messages": [[{"role": "user", "content": "q"}, {"role": "assistant", "content": d}]
                                   for d in demos]}).to_parquet(run / "rationalized_sft.parquet")
    blind = pd.Series([True, True, False, False], index=pd.RangeIndex(4, name="prompt_index"))
    planted = {"meeting_tiny": Planted("meeting_tiny", blind, {"imperfect_fraction": 0.1, "blind_spot_slip": 0.9})}
    judge = {("meeting_tiny", method, seed): {"judge": pd.Series([0.864, 0.864, level + 0.01 * seed, level],
                                                                 index=blind.index)}
             for method, level in (("sft", 0.5), ("grpo_sim", 0.6), ("softmax_sim", 0.7)) for seed in range(3)}
    allocation = pd.DataFrame([{"task": "arith_tiny", "method": m, "seed": s, "bin0": 1.0, "bin1": 2.0, "bin2": 3.0,
                                "bin3": 4.0, "bin4": 1.0, "unbinned": 1.0, "groups": 30, "groups_unbinned": 3}
                               for s in range(3) for m in ("grpo_exact", "softmax_exact")])
    nonverifiable = tmp_path / "nonverifiable.md"
    nonverifiable.write_text("| Method | meeting_tiny |\n|---|---|\n| SFT | 60.0 |")
    unstated = {key: pd.Series(["none"] * 4, index=blind.index, dtype=object) for key in judge}  # no vote stated
    report = build_report("tiny", REFERENCE, table1, allocation, scores, judge, {"nonverifiable": nonverifiable},
                          planted=planted, demonstrations=demonstrations, slips=unstated)
    sections = report.split("\n## ")
    assert sections[1].startswith("Summary")
    summary = sections[1]
    assert "over 2 task(s) (arith_tiny, meeting_tiny)" in summary and "seed(s) (0, 1, 2)" in summary
    ledger = report.split("## Claims")[1]
    # what holds is the claims table's verdict, word for word, never typed in
    assert "| supported |" in ledger and "- supported: RL with the verifier improves on SFT" in summary
    assert "3 of its 40 generated demonstrations (7.5%) are well-formed" in summary
    assert "The judge of `meeting_tiny` is not shown to see the planted slip: of its 36 judged outputs, 0 with the " \
        "slip, 0 stating the vote count right, 36 not stating it" in summary and "cannot be measured" in summary
    assert "9 of its 90 groups (8.3% of the budget) answer a prompt the run visited only once" in summary
    assert "The paper's absolute accuracies" in summary
    table = report.split("## Table 1")[1].split("\n## ")[0]
    assert "| Rationalization † |" in table and "† Rationalization on `arith_tiny`: 3 of" in table
    assert "not shown to see the planted slip" in report.split("## nonverifiable")[1].split("\n## ")[0]
    # SFT carries the slip on the blind spot, the RL runs state the vote right, and the judge scores the slip lower
    slipped = {k: pd.Series(["correct", "correct"] + ["slip" if k[1] == "sft" else "correct"] * 2, index=blind.index,
                            dtype=object) for k in judge}
    sees = {k: {"judge": judge[k]["judge"] - 0.2 * (slipped[k] == "slip")} for k in judge}
    assert "planted slip" not in build_report("tiny", REFERENCE, table1, None, scores, sees, planted=planted,
                                              slips=slipped)


def test_load_slips_reads_the_vote_each_judged_output_states(tmp_path):
    """Each judged output is classed against the vote the generator recorded: stated right, swapped (the expert's
    slip), not stated, stated otherwise, or a tie the swap cannot change; a resolution number is not a vote."""
    from pipeline_lib.paper.summary import load_slips

    votes = [(5, 2), (3, 3), (6, 1), (4, 0), (7, 0)]
    test = tmp_path / "data/meeting_tiny/rl_test.parquet"
    test.parent.mkdir(parents=True)
    pd.DataFrame({"extra_info": [{"facts": {"votes_for": f, "votes_against": a}} for f, a in votes]}).to_parquet(test)
    run = tmp_path / "judge/primary/meeting_tiny/sft/seed2"
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    responses = ["Resolution 2020-94 passed 5-2.", "the motion failed 3-3.", "Resolution 2021-16 passed 1 - 6.",
                 "Resolution 2022-52 to fund road repairs; the motion", "the motion passed 6-1."]
    (run / "scores.jsonl").write_text("".join(json.dumps({"prompt_index": i, "response": r, "score_100": 80.0}) + "\n"
                                              for i, r in enumerate(responses)))
    slips = load_slips(runs_written([run / "summary.json"]), {"meeting_tiny": test})
    assert list(slips) == [("meeting_tiny", "sft", 2)]
    assert slips[("meeting_tiny", "sft", 2)].tolist() == ["correct", "tie", "slip", "none", "other"]
    (run / "scores.jsonl").write_text(json.dumps({"prompt_index": 9, "response": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"scores.jsonl:1: .*meeting_tiny's test split"):
        load_slips(runs_written([run / "summary.json"]), {"meeting_tiny": test})


def _slip_runs(seeds: int, gap: float, noise: float) -> tuple[dict, dict]:
    """SFT carries the slip on half of 40 prompts, GRPO-Sim states the vote right everywhere; the judge's score is
    0.8 + noise, ``gap`` lower on a slipped output."""
    rng = np.random.default_rng(seeds)
    index = pd.RangeIndex(40, name="prompt_index")
    slips = {("meeting_tiny", m, s): pd.Series(["slip" if m == "sft" and i % 2 else "correct" for i in index],
                                               index=index, dtype=object)
             for m in ("sft", "grpo_sim") for s in range(seeds)}
    judge = {k: {"judge": 0.8 + rng.normal(0, noise, len(index)) - gap * (v == "slip")} for k, v in slips.items()}
    return {k: {"judge": pd.Series(v["judge"], index=index)} for k, v in judge.items()}, slips


def test_a_judge_is_blind_to_the_slip_only_when_its_measured_gap_is_not_above_zero():
    """The score gap for the slip (right minus slipped, same prompt and seed) with its 95% interval: seeds are the
    unit where several have pairs, items where one seed does; a judge whose interval reaches 0 gets the note."""
    from pipeline_lib.paper.miniature import Planted
    from pipeline_lib.paper.summary import artefact_notes, blind_judges, slip_gaps

    planted = {"meeting_tiny": Planted("meeting_tiny", pd.Series([True] * 40), {})}
    quality = pd.DataFrame(columns=["task", "seed", "demonstrations", "well_formed"])
    judge, slips = _slip_runs(3, 0.1, 0.02)  # the judge marks the slip down by 10 points
    gap = slip_gaps(judge, slips)["meeting_tiny"]
    assert gap.unit == "seed" and gap.n == 3 and gap.pairs == 60 and 0 < gap.low < 0.1 < gap.high
    assert abs(gap.gap - 0.1) < 0.01
    assert gap.counts == {"correct": 180, "slip": 60}
    assert blind_judges(planted, judge, slips) == {} and artefact_notes(quality, {}, None) == []
    judge, slips = _slip_runs(1, 0.0, 0.02)  # one seed, a judge that scores the slip like a right vote
    gap = slip_gaps(judge, slips)["meeting_tiny"]
    assert gap.unit == "item" and gap.n == 20 and gap.low < 0 < gap.high
    notes = artefact_notes(quality, blind_judges(planted, judge, slips), None)
    assert len(notes) == 1 and notes[0].startswith("The judge of `meeting_tiny` is not shown to see the planted slip")
    assert "over 20 items, not distinguishable from 0" in notes[0]
    assert "95% t-interval of that gap lies above 0" in notes[0]
    assert blind_judges({}, judge, slips) == {}  # a task with no planted blind spot is not judged for it
