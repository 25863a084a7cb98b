"""Accuracy and pass@k are the task verifier's, whatever reward training used (issue 35, class 4): a model whose
every answer is right scores 1.0 under any ``reward_weights``, the weighted training reward is reported beside it
under its own name, and an evaluation asked for pass@k beyond its samples (or for fewer than one prompt) says so. The
cases are rows of docs/hostile_cases.md."""

from __future__ import annotations

import pytest


class _AlwaysRight:
    """A model whose every answer is right: it answers each prompt with the task's own worked solution (the
    generation backend is the only thing replaced; the data, the scorers and the metrics are the real ones)."""

    def __init__(self, frame):
        self.answers = {p[0]["content"]: info["reference"] for p, info in zip(frame["prompt"], frame["extra_info"],
                                                                               strict=True)}

    def generate(self, prompts, *, samples, greedy):
        from pipeline_lib.jobs.eval.backends import Generation

        return [[Generation(self.answers[p[0]["content"]], 9)] * samples for p in prompts]


@pytest.mark.parametrize("weights", [None, {"math": 1.0}, {"math": 0.5}, {"math": 3.0}, {"math": 1.0, "format": 1.0}],
                         ids=["default", "default_spelled_out", "half", "triple", "plus_format"])
def test_an_always_right_model_scores_accuracy_one_whatever_the_reward_weights(tmp_path, monkeypatch, weights):
    import contextlib

    import pandas as pd

    from pipeline_lib.core.data.build import build_tiny
    from pipeline_lib.core.rewards import score
    from pipeline_lib.jobs.eval import evaluate as evaluate_module

    spec = {"n_train": 8, "n_test": 6, "n_val": 0, "imperfect_fraction": 0.0, "numbers_per_task": [3],
            "max_number": 9, "max_target": 100}
    build_tiny("arith_tiny", spec, 0, weights, tmp_path / "data")
    frame = pd.read_parquet(tmp_path / "data/rl_test.parquet")
    monkeypatch.setattr(evaluate_module, "open_backend",
                        lambda *args, **kwargs: contextlib.nullcontext(_AlwaysRight(frame)))
    metrics, generations = evaluate_module.evaluate(
        tmp_path, tmp_path / "data/rl_test.parquet", {"samples": 4, "pass_k": [1, 4], "max_new_tokens": 8}, 0)
    assert metrics["pass@1_greedy"] == metrics["pass@1_sampled"] == metrics["pass@1"] == metrics["pass@4"] == 1.0
    assert metrics["score_kind"] == "verifier" and all(g["score"] == 1.0 for g in generations)
    if weights in (None, {"math": 1.0}):  # training's reward is the verifier: nothing else reported, as before
        assert "reward_mean_greedy" not in metrics and all("reward" not in g for g in generations)
    else:  # the weighted training reward, under its own name
        expected = [sum(w * score(name, info["reference"], truth["ground_truth"])["score"]
                        for name, w in weights.items()) for info, truth in zip(frame["extra_info"],
                                                                               frame["reward_model"], strict=True)]
        assert metrics["reward_mean_greedy"] == pytest.approx(sum(expected) / len(expected))
        assert metrics["reward_mean_sampled"] == pytest.approx(sum(expected) / len(expected))
        assert "extra_info reward_weights" in metrics["reward_kind"]


def test_an_evaluation_asked_for_pass_at_k_beyond_its_samples_says_so(tmp_path, monkeypatch):
    import contextlib

    import pandas as pd

    from pipeline_lib.core.data.build import build_tiny
    from pipeline_lib.jobs.eval import evaluate as evaluate_module

    build_tiny("arith_tiny", {"n_train": 8, "n_test": 3, "n_val": 0, "imperfect_fraction": 0.0,
                              "numbers_per_task": [3], "max_number": 9, "max_target": 100}, 0, None, tmp_path / "data")
    frame = pd.read_parquet(tmp_path / "data/rl_test.parquet")
    monkeypatch.setattr(evaluate_module, "open_backend",
                        lambda *args, **kwargs: contextlib.nullcontext(_AlwaysRight(frame)))
    for spec, says in (({"samples": 4, "pass_k": [16]}, "pass@16 needs at least 16 samples"),
                       ({"samples": 4, "pass_k": [4], "max_prompts": 0}, "max_prompts 0: a number of prompts >= 1"),
                       ({"samples": 4, "pass_k": [4], "max_prompts": -5}, "max_prompts -5")):
        with pytest.raises(ValueError, match=says):
            evaluate_module.evaluate(tmp_path, tmp_path / "data/rl_test.parquet", spec | {"max_new_tokens": 8}, 0)
