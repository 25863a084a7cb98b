"""Result tables from synthetic result files with known numbers."""

import json

import pandas as pd
import pytest

from pipeline_lib.paper.results import (
    allocation_bins,
    allocation_data,
    allocation_table,
    bin_names,
    table1,
    table1_data,
)
from pipeline_lib.plan import METHODS, RunId
from pipeline_lib.plan.settings import group_rl_spec, reference_prompts
from tests.conftest import runs_written


def write_metrics(root, task, method, seed, value):
    path = root / "results/eval" / task / method / f"seed{seed}" / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pass@1_greedy": value, "mean_length_greedy": 10.0}))
    return str(path), RunId("main", task, method, seed, f"results/train/{task}/{method}/seed{seed}/DONE.json")


def test_table1_means_spread_bold_and_missing_cells(tmp_path):
    paths = [write_metrics(tmp_path, "a_task", "sft", 0, 0.30), write_metrics(tmp_path, "a_task", "sft", 1, 0.40),
             write_metrics(tmp_path, "a_task", "softmax_exact", 0, 0.50),
             write_metrics(tmp_path, "a_task", "softmax_exact", 1, 0.70),
             write_metrics(tmp_path, "b_task", "sft", 0, 0.9)]
    frame = table1_data(dict(paths))
    assert set(frame.columns) >= {"task", "method", "seed", "pass@1_greedy"}
    csv, md, tex = table1(frame, "pass@1_greedy", "tiny", tmp_path / "table1")
    table = pd.read_csv(csv)
    assert list(table["Method"]) == ["SFT", "SoftmaxGRPO-Exact"]
    assert table.loc[0, "a_task"] == "35.0 ± 7.1 (n=2)"
    # the higher mean is no "best" on 2 seeds (no verdict), nor a lone method in its column: no bold anywhere
    assert table.loc[1, "a_task"] == "60.0 ± 14.1 (n=2)"
    assert table.loc[1, "b_task"] == "--"  # not run on that task, shown as in the paper
    assert table.loc[0, "b_task"] == "90.0 (n=1)"
    latex = tex.read_text()
    assert "**" not in md.read_text().split("| Method")[1] and not any(rf"\textbf{{{v}" in latex
                                                                      for v in ("35.0", "60.0", "90.0"))
    assert r"60.0$\pm$14.1" in latex and r"\toprule" in latex
    assert "tiny run: not comparable" in md.read_text()


def _step(step: int, prompts: list, correct: list[list[int]], lengths: list[int], field: str = "prompt_index",
          advantage: str = "grpo", params: dict | None = None) -> dict:
    """One step's rollouts.jsonl line: group g answers prompts[g], with its rollouts' 0/1 correctness (the reward)
    and one response length per group; the logged advantage is the registry's ``advantage`` on those rewards."""
    import torch

    from pipeline_lib.core.rl.advantages import group_advantages

    group = [g for g, c in enumerate(correct) for _ in c]
    reward = [float(x) for c in correct for x in c]
    adv = group_advantages(advantage, torch.tensor(reward, dtype=torch.float64), torch.tensor(group), **(params or {}))
    record = {"step": step, "group": group, "reward": reward, "correct": [x for c in correct for x in c],
              "advantage": adv.tolist(), "length": [lengths[g] for g in group], field: [prompts[g] for g in group]}
    if field == "prompt_key":
        record["prompt_uid"] = [f"visit-{step}-{g}" for g in group]  # verl's per-visit uid, beside the prompt key
    return record


#: Prompt A near-solved on its other visits (8/8, 8/8), then a 7/8 visit; B visited once; C at 2/8 and 6/8.
NEAR_SOLVED = [(["A", "B"], [[1] * 8, [1, 1, 1, 1, 0, 0, 0, 0]]), (["A", "C"], [[1] * 8, [1, 1, 0, 0, 0, 0, 0, 0]]),
               (["A", "C"], [[1] * 7 + [0], [1] * 6 + [0, 0]])]


def _write_near_solved(path, field: str, advantage: str = "grpo", params: dict | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = {"prompt_index": {"A": 3, "B": 7, "C": 11}, "prompt_key": {"A": "9f2c", "B": "04aa", "C": "77b1"}}[field]
    path.write_text("".join(json.dumps(_step(s + 1, [keys[k] for k in prompts], correct, [2, 3], field, advantage,
                                             params)) + "\n"
                            for s, (prompts, correct) in enumerate(NEAR_SOLVED)))


@pytest.mark.parametrize("field", ["prompt_index", "prompt_key"])  # the local engine's and verl's rollouts.jsonl
def test_gradient_allocation_bins_by_the_prompts_pass_rate_over_its_other_visits(tmp_path, field):
    """A 7/8 group whose prompt was solved on its other visits spends its gradient in [0.9, 1] (its own k/M = 0.875
    would put it in [0.7, 0.9)); a prompt visited once is unbinned and counted; C's two visits bin each other."""
    import torch

    from pipeline_lib.core.rl.advantages import group_advantages

    path = tmp_path / "rollouts.jsonl"
    _write_near_solved(path, field)
    bins = allocation_bins(path)

    def budget(correct: list[int], length: int) -> float:
        rewards = torch.tensor(correct, dtype=torch.float64)
        return float(length * group_advantages("grpo", rewards, torch.zeros(len(correct), dtype=torch.long)).abs()
                     .sum())

    near, once = budget(NEAR_SOLVED[2][1][0], 2), budget(NEAR_SOLVED[0][1][1], 3)
    c_low, c_high = budget(NEAR_SOLVED[1][1][1], 3), budget(NEAR_SOLVED[2][1][1], 3)
    assert near > 0 and bins["bin4"] == pytest.approx(near)  # A's other visits: 16/16 -> p = 1
    assert bins["bin3"] == pytest.approx(c_low)  # C at 2/8, its other visit 6/8 -> p = 0.75
    assert bins["bin1"] == pytest.approx(c_high)  # C at 6/8, its other visit 2/8 -> p = 0.25
    assert bins["bin0"] == bins["bin2"] == 0.0
    assert bins["unbinned"] == pytest.approx(once) and bins["groups_unbinned"] == 1 and bins["groups"] == 6
    assert bins["prompts"] == 3 and bins["group_size"] == 8
    run = RunId("main", "t", "grpo_exact", 0, "results/train/t/grpo_exact/seed0/DONE.json")
    frame = allocation_data({str(path): run})
    csv, md, _ = allocation_table(frame, "tiny", tmp_path / "alloc")
    row = pd.read_csv(csv).iloc[0]
    total = near + c_low + c_high
    assert row["[0.9,1]"] == f"{100 * near / total:.1f}%" and row["[0,0.2)"] == "0.0%"
    assert sum(float(row[c].rstrip("%")) for c in bin_names()) == pytest.approx(100, abs=0.2)
    assert row["Unbinned"] == f"{100 * once / (total + once):.1f}% (1/6 groups)"
    assert "other visits" in md.read_text() and "this group left out" in md.read_text()


def test_softmax_and_grpo_put_different_shares_on_near_solved_prompts(tmp_path):
    """The same rollouts re-weighted by each estimator: SoftmaxGRPO (tau 0.1) gives the near-solved 7/8 group less of
    the budget than GRPO does (binned by other visits, the bins an estimator cannot change)."""
    path = tmp_path / "rollouts.jsonl"
    _write_near_solved(path, "prompt_index")
    grpo, softmax = allocation_bins(path, ("grpo", {})), allocation_bins(path, ("softmax", {"tau": 0.1}))
    share = {name: b["bin4"] / sum(b[f"bin{i}"] for i in range(5)) for name, b in (("grpo", grpo),
                                                                                   ("softmax", softmax))}
    assert share["softmax"] < share["grpo"] - 0.01
    assert grpo["groups_unbinned"] == softmax["groups_unbinned"] == 1


def test_gradient_allocation_names_the_file_when_a_prompt_is_unknown(tmp_path):
    """A rollouts.jsonl without the prompt of each rollout (an old verl one: only the per-visit prompt_uid) cannot be
    binned by other visits: an error naming the file and line, never a silent per-group binning."""
    path = tmp_path / "old" / "rollouts.jsonl"
    _write_near_solved(path, "prompt_key")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        del line["prompt_key"]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(ValueError, match=r"old/rollouts\.jsonl line 1: no prompt_index or prompt_key"):
        allocation_bins(path)
    mixed = lines[0] | {"prompt_index": [0] * 7 + [1] + [2] * 8}
    path.write_text(json.dumps(mixed) + "\n")
    with pytest.raises(ValueError, match=r"line 1: group 0 holds rollouts of more than one prompt"):
        allocation_bins(path)


def test_paired_methods_differ_only_in_advantage_and_reward():
    from pipeline_lib.core.config import load_config_file, validate_config
    from tests.conftest import REPO

    schema = REPO / "workflow/schemas/config.schema.yaml"  # the typed settings need every train.rl key
    config = validate_config(load_config_file(REPO / "config/config.yaml"), schema, base_dir=REPO)
    config["train"]["methods"] = {
        "grpo_exact": {"advantage": "grpo", "reward": "verifier"},
        "softmax_exact": {"advantage": "softmax", "tau": 0.1, "reward": "verifier"},
        "softmax_sim": {"advantage": "softmax", "tau": 0.1, "reward": "similarity"}}
    grpo, softmax = (group_rl_spec(config, "countdown", m, "local").to_dict() for m in ("grpo_exact", "softmax_exact"))
    differing = {k for k in grpo if grpo[k] != softmax[k]}
    assert differing == {"method", "estimator"}
    assert group_rl_spec(config, "countdown", "softmax_sim", "local").reward_weights == {"similarity": 1.0}
    assert METHODS["softmax_sim"].demonstrations and not METHODS["softmax_exact"].demonstrations
    assert reference_prompts("countdown").endswith("rl_sim_train.parquet")


def test_reproduction_report_compares_only_paper_runs(tmp_path):
    from pathlib import Path

    import yaml

    from pipeline_lib.paper.reproduction import build_report

    reference = yaml.safe_load((Path(__file__).parents[2] / "config/paper_reference.yaml").read_text())
    ours = pd.DataFrame([{"task": "countdown", "method": "softmax_exact", "seed": 0, "pass@1_greedy": 0.60},
                         {"task": "countdown", "method": "softmax_exact", "seed": 1, "pass@1_greedy": 0.56}])
    paper_run = build_report("paper", reference, ours, None)
    assert "ours 58.0 / paper 58.1 (Δ -0.1)" in paper_run
    tiny_run = build_report("tiny", reference, ours.assign(task="countdown_tiny"), None)
    assert "ours 58.0 / paper 58.1" in tiny_run and "Δ" not in tiny_run.split("## Table 1")[1]
    assert "## scale" in tiny_run and "Not reproduced" in tiny_run
    assert reference["table1"]["rows"]["softmax_exact"] == [75.8, 58.1, 51.8]


def test_bold_marks_only_a_best_the_claims_rules_support(tmp_path):
    """Bold is a claim: a 3-seed gain whose paired interval excludes 0 after Holm is marked; a 0.1-point lead
    (as OPD 86.9 vs 86.7 was) or a lead on one seed is not."""
    from pipeline_lib.paper.verdicts import supported_best

    paths = []
    for seed, (sft, grpo) in enumerate(((0.30, 0.60), (0.32, 0.61), (0.31, 0.63))):
        paths += [write_metrics(tmp_path, "clear", "sft", seed, sft), write_metrics(tmp_path, "clear", "grpo_exact",
                                                                                  seed, grpo)]
        paths += [write_metrics(tmp_path, "close", "sft", seed, 0.500 + 0.02 * seed),
                  write_metrics(tmp_path, "close", "grpo_exact", seed, 0.501 + 0.02 * seed - 0.03 * (seed == 1))]
    csv, md, _ = table1(table1_data(dict(paths)), "pass@1_greedy", "tiny", tmp_path / "table1")
    table = pd.read_csv(csv).set_index("Method")
    assert table.loc["GRPO-Exact", "clear"].startswith("**") and "**" not in table.loc["SFT", "clear"]
    assert "**" not in table["close"].str.cat()
    assert "bold only where the claims rules support it" in md.read_text()
    assert supported_best({"col": {"opd": {0: 86.9}, "softmax_sim": {0: 86.7}}}) == {}


def test_training_curves_band_seeds_and_keep_reward_kinds_apart(tmp_path):
    """A reward panel per kind (the verifier's 0/1 and the similarity reward are different scales), each method a
    mean line with a min-max band across seeds, the band the spread of the seeds' smoothed curves."""
    import matplotlib.pyplot as plt
    import numpy as np

    from pipeline_lib.paper.curves import curves, curves_figure

    paths = []
    for method, level in (("grpo_exact", 0.2), ("softmax_exact", 0.3), ("grpo_sim", 0.6), ("softmax_sim", 0.7)):
        for seed in range(3):
            path = tmp_path / "results/train/arith_tiny" / method / f"seed{seed}" / "metrics.jsonl"
            path.parent.mkdir(parents=True)
            rows = [{"step": step, "critic/score/mean": level + 0.02 * step + 0.05 * seed, "actor/kl_loss": 0.01 * step,
                     "response_length/mean": 20.0 + seed} for step in range(1, 11)]
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            paths.append(path)
    frame = pd.concat([pd.read_json(p, lines=True).assign(task="arith_tiny", method=p.parent.parent.name,
                                                        seed=int(p.parent.name[4:])) for p in paths])
    fig = curves_figure(frame, "tiny")
    axes = {ax.get_title(): ax for ax in fig.axes}
    verifier, similarity = axes["arith_tiny: training reward: verifier"], \
        axes["arith_tiny: training reward: similarity"]
    assert [line.get_label() for line in verifier.get_lines()] == ["GRPO-Exact", "SoftmaxGRPO-Exact"]
    assert [line.get_label() for line in similarity.get_lines()] == ["GRPO-Sim", "SoftmaxGRPO-Sim"]
    band = verifier.collections[0].get_paths()[0].vertices
    assert np.isclose(band[:, 1].min(), 0.2 + 0.02) and np.isclose(band[:, 1].max(), 0.2 + 0.02 * 8 + 0.1)
    assert len(similarity.collections) == 2
    assert "min-max across seeds (band; 3 seed(s) per run)" in fig._suptitle.get_text()
    plt.close(fig)
    curves(runs_written(paths), "tiny", str(tmp_path / "c.png"), str(tmp_path / "c.pdf"))
    assert (tmp_path / "c.png").stat().st_size > 0


def test_judged_table_marks_no_best_on_a_single_seed_lead(tmp_path):
    """OPD 86.9 vs SoftmaxGRPO-Sim 86.7 on one seed each: no verdict, so no bold in the non-verifiable table; a
    3-seed lead the claims rules support is bold."""
    from pipeline_lib.paper.judging import nonverifiable_table

    paths = []
    for task, scores in (("close", {"opd": [86.9], "softmax_sim": [86.7]}),
                         ("clear", {"sft": [40.0, 41.0, 42.5], "softmax_sim": [70.0, 71.5, 72.0]})):
        for method, values in scores.items():
            for seed, value in enumerate(values):
                path = tmp_path / "judge/primary" / task / method / f"seed{seed}" / "summary.json"
                path.parent.mkdir(parents=True)
                path.write_text(json.dumps({"score_100": value, "failed": 0, "judge": {"label": "j", "kind": "k"}}))
                paths.append(path)
    csv, _, tex = nonverifiable_table(runs_written(paths), ["sft", "opd", "softmax_sim"], "tiny", tmp_path / "nv")
    table = pd.read_csv(csv).set_index("Method")
    assert "**" not in table["close"].str.cat()
    assert table["clear"].str.cat().count("**") == 2 and table.loc[table.index[2], "clear"].startswith("**")
    assert r"\textbf{86.9}" not in tex.read_text()


def test_gradient_allocation_bins_by_the_pass_rate_probe_where_a_run_has_one(tmp_path):
    """With a probe (pipeline_lib.jobs.eval.probe's probe.jsonl) each probed group is binned by its probe p, whatever
    its prompt's other visits say, and a group the probe did not draw is unbinned; the table names the measure."""
    import torch

    from pipeline_lib.core.rl.advantages import group_advantages

    path = tmp_path / "rollouts.jsonl"
    _write_near_solved(path, "prompt_index")
    probe = tmp_path / "probe.jsonl"
    # step 1: A's group at 3/16 (p 0.1875 -> [0, 0.2)), B's at 16/16 (-> [0.9, 1]); step 3: C's group at 9/16
    # (p 0.5625 -> [0.5, 0.7)); the other three groups were not drawn
    probe.write_text(json.dumps({"window": 0, "model": "m", "samples": 16, "step": [1, 1], "group": [0, 1],
                                 "row": [3, 7], "correct": [3, 16]}) + "\n"
                     + json.dumps({"window": 2, "model": "m", "samples": 16, "step": [3], "group": [1], "row": [11],
                                   "correct": [9]}) + "\n")
    bins = allocation_bins(path, probe=probe)

    def budget(correct: list[int], length: int) -> float:
        rewards = torch.tensor(correct, dtype=torch.float64)
        return float(length * group_advantages("grpo", rewards, torch.zeros(len(correct), dtype=torch.long)).abs()
                     .sum())

    a_first, b_once = budget(NEAR_SOLVED[0][1][0], 2), budget(NEAR_SOLVED[0][1][1], 3)
    c_last = budget(NEAR_SOLVED[2][1][1], 3)
    assert a_first == 0.0 and b_once > 0 and c_last > 0  # an all-correct group spends nothing, whatever its bin
    assert bins["bin4"] == pytest.approx(b_once) and bins["bin2"] == pytest.approx(c_last)
    assert bins["bin0"] == bins["bin1"] == bins["bin3"] == 0.0
    assert bins["groups"] == 6 and bins["groups_unbinned"] == 3 and bins["measure"] == "probe K=16"
    not_drawn = budget(NEAR_SOLVED[1][1][1], 3) + budget(NEAR_SOLVED[2][1][0], 2)
    assert bins["unbinned"] == pytest.approx(not_drawn)
    run = RunId("main", "t", "grpo_exact", 0, "results/train/t/grpo_exact/seed0/DONE.json")
    frame = allocation_data({str(path): run}, {str(path): str(probe)})
    csv, md, _ = allocation_table(frame, "tiny", tmp_path / "alloc")
    row = pd.read_csv(csv).iloc[0]
    assert row["p"] == "probe K=16" and row["Unbinned"].endswith("(3/6 groups)")
    assert "pass-rate probe" in md.read_text()


def test_a_probe_of_another_run_is_refused_naming_it(tmp_path):
    """A probe.jsonl whose groups are not the run's (another run's, or an earlier training's) is an error naming the
    probe file, never a silent partial binning."""
    path = tmp_path / "rollouts.jsonl"
    _write_near_solved(path, "prompt_index")
    probe = tmp_path / "other" / "probe.jsonl"
    probe.parent.mkdir()
    probe.write_text(json.dumps({"window": 0, "model": "m", "samples": 4, "step": [9], "group": [0], "row": [3],
                                 "correct": [1]}) + "\n")
    with pytest.raises(ValueError, match=r"other/probe\.jsonl: 1 probed groups are not groups of"):
        allocation_bins(path, probe=probe)
    probe.write_text(json.dumps({"window": 0, "model": "m", "samples": 4, "step": [1], "group": [0], "row": [3],
                                 "correct": [5]}) + "\n")
    with pytest.raises(ValueError, match=r"probe\.jsonl line 1: .*counts outside 0\.\.4"):
        allocation_bins(path, probe=probe)
