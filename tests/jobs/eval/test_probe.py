"""The pass-rate probe (pipeline_lib.jobs.eval.probe): windows, the uniform draw of groups per window, the groups read
from a run's rollouts, and a whole probe of a run on the hf backend with a tiny model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline_lib.jobs.eval.probe import choose_groups, read_visits, window_of


def test_a_visit_is_probed_by_the_policy_kept_before_its_step():
    """Step t's rollouts were sampled after t - 1 updates: steps 1..10 by the start (0), 11..20 by step 10's policy."""
    steps = np.array([1, 10, 11, 20, 21, 35])
    assert window_of(steps, [0, 10, 20, 30]).tolist() == [0, 0, 10, 10, 20, 30]


def test_groups_are_drawn_per_window_uniformly_and_reproducibly():
    windows = np.repeat([0, 10, 20], [50, 5, 30])
    chosen = choose_groups(windows, 8, seed=3)
    assert np.bincount(windows[chosen] // 10).tolist() == [8, 5, 8]  # a window with fewer groups gives them all
    assert np.array_equal(chosen, choose_groups(windows, 8, seed=3))
    assert not np.array_equal(chosen, choose_groups(windows, 8, seed=4))
    assert choose_groups(windows, None, seed=0).tolist() == list(range(85))
    # uniform: over many seeds every group of the first window is drawn about 8/50 of the time
    counts = np.zeros(50)
    for seed in range(400):
        picked = choose_groups(windows, 8, seed)
        counts += np.bincount(picked[picked < 50], minlength=50)
    assert counts.min() > 0.5 * 400 * 8 / 50 and counts.max() < 1.5 * 400 * 8 / 50


@pytest.mark.parametrize("field", ["prompt_index", "prompt_row"])  # the local engine's, verl's
def test_visits_are_the_groups_of_a_runs_rollouts(tmp_path, field):
    path = tmp_path / "rollouts.jsonl"
    path.write_text(json.dumps({"step": 1, "group": [0, 0, 1, 1], field: [5, 5, 2, 2]}) + "\n"
                    + json.dumps({"step": 2, "group": [1, 1, 0, 0], field: [9, 9, 5, 5]}) + "\n")
    visits = read_visits(path)
    assert visits["step"].tolist() == [1, 1, 2, 2]
    assert visits["group"].tolist() == [0, 1, 0, 1] and visits["row"].tolist() == [5, 2, 5, 9]
    path.write_text(json.dumps({"step": 1, "group": [0, 0], field: [5, -1]}) + "\n")
    with pytest.raises(ValueError, match="more than one training row"):
        read_visits(path)
    path.write_text(json.dumps({"step": 1, "group": [0, 0], field: [-1, -1]}) + "\n")
    with pytest.raises(ValueError, match="1 groups name no training row"):
        read_visits(path)
    path.write_text(json.dumps({"step": 1, "group": [0, 0], "prompt_key": ["a", "a"]}) + "\n")
    with pytest.raises(ValueError, match=r"rollouts\.jsonl line 1: needs `step`, `group` and one of"):
        read_visits(path)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A run directory of a 4-step run that kept its policy after step 2, its start model and training prompts."""
    from transformers import AutoTokenizer

    from pipeline_lib.core.checkpoint import probe_dir
    from pipeline_lib.core.data.build import build_tiny, build_tokenizer
    from pipeline_lib.core.model import build_model, save_model_atomic
    from tests.conftest import MODEL

    root = tmp_path_factory.mktemp("probe")
    tiny = {"n_train": 20, "n_test": 4, "imperfect_fraction": 0.0, "numbers_per_task": [3], "max_number": 9,
            "max_target": 100}
    build_tiny("arith_tiny", tiny, 0, None, root / "data")
    build_tokenizer([root / "data/sft_train.parquet"], 300, root / "tok")
    tokenizer = AutoTokenizer.from_pretrained(root / "tok")
    save_model_atomic(build_model(tokenizer, MODEL, 0), tokenizer, root / "init")
    run = root / "run"
    save_model_atomic(build_model(tokenizer, MODEL, 1), tokenizer, probe_dir(run, 2))
    # 4 steps of 3 groups of 2 rollouts; rows cycle over the first 5 training prompts
    lines = [{"step": step, "group": [0, 0, 1, 1, 2, 2], "prompt_index": [r for g in range(3)
                                                                          for r in [(3 * step + g) % 5] * 2]}
             for step in range(1, 5)]
    (run / "rollouts.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return root


def _spec(groups):
    return {"probe_every": 2, "steps": 4, "samples": 3, "groups": groups,
            "generation": {"backend": "hf", "batch_size": 16, "max_new_tokens": 8, "temperature": 1.0, "top_p": 1.0}}


def test_a_probe_samples_each_drawn_group_from_its_windows_policy(tiny_run, tmp_path):
    """Steps 1-2 are probed with the start model, 3-4 with the policy kept after step 2; K answers per probed prompt,
    scored by the verifier; the same seed draws and samples the same."""
    from pipeline_lib.jobs.eval import probe

    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert probe.main(["--run", str(tiny_run / "run"), "--init", str(tiny_run / "init"), "--data",
                           str(tiny_run / "data/rl_train.parquet"), "--spec", json.dumps(_spec(2)), "--seed", "5",
                           "--out", str(out)]) == 0
        outs.append([json.loads(line) for line in (out / "probe.jsonl").read_text().splitlines()])
    lines = outs[0]
    assert lines == outs[1]
    assert [line["window"] for line in lines] == [0, 2]
    assert lines[0]["model"] == str(tiny_run / "init") and lines[1]["model"].endswith("probe/step_2")
    for line in lines:
        assert len(line["group"]) == 2 and line["samples"] == 3  # 2 of the window's 6 groups
        assert all(0 <= c <= 3 for c in line["correct"])
        assert set(line["step"]) <= ({1, 2} if line["window"] == 0 else {3, 4})
        assert all(row == (3 * step + group) % 5 for step, group, row in zip(line["step"], line["group"],
                                                                             line["row"], strict=True))
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["groups_visited"] == 12 and summary["groups_probed"] == 4
    sidecar = json.loads((tmp_path / "a" / "probe.jsonl.prov.json").read_text())
    assert sidecar["step"] == "probe_pass_rate"


def test_a_probe_without_the_kept_policy_says_how_to_get_it(tiny_run, tmp_path):
    import shutil

    from pipeline_lib.jobs.eval import probe

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(tiny_run / "run" / "rollouts.jsonl", run / "rollouts.jsonl")
    with pytest.raises(FileNotFoundError, match=r"probe/step_2: the policy this run kept after step 2"):
        probe.main(["--run", str(run), "--init", str(tiny_run / "init"), "--data",
                    str(tiny_run / "data/rl_train.parquet"), "--spec", json.dumps(_spec(None)), "--seed", "0",
                    "--out", str(tmp_path / "out")])
