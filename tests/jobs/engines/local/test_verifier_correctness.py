"""The local trainers log a right answer as correct whatever the reward weights (issue 35, class 4): a rollout's
``correct`` is the verifier's, its reward the weighted composition it trains on. A row of docs/hostile_cases.md."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("weights", [{"math": 0.5}, {"math": 1.0, "format": 1.0}], ids=["half", "plus_format"])
def test_training_logs_a_right_answer_as_correct_whatever_the_reward_weights(tmp_path, weights):
    """The local trainers' pass rate (and iterative DPO's validation accuracy) is the verifier's correctness too."""
    import pandas as pd

    from pipeline_lib.core.data.build import build_tiny
    from pipeline_lib.core.rewards import score
    from pipeline_lib.jobs.methods.rewards import rollout_rewards

    build_tiny("arith_tiny", {"n_train": 8, "n_test": 4, "n_val": 0, "imperfect_fraction": 0.0,
                              "numbers_per_task": [3], "max_number": 9, "max_target": 100}, 0, weights,
               tmp_path / "data")
    frame = pd.read_parquet(tmp_path / "data/rl_test.parquet")
    rows, right = list(range(len(frame))), [info["reference"] for info in frame["extra_info"]]
    rewards, correct = rollout_rewards(frame, rows, right, None)
    trained = [sum(w * score(name, text, truth["ground_truth"])["score"] for name, w in weights.items())
               for text, truth in zip(right, frame["reward_model"], strict=True)]
    assert correct.tolist() == [1.0] * len(rows) and rewards.tolist() == pytest.approx(trained)  # trained on weights
    verifier_rewards, verifier_correct = rollout_rewards(frame, rows, right, None, verifier=True)
    assert verifier_rewards.tolist() == verifier_correct.tolist() == [1.0] * len(rows)
    wrong = rollout_rewards(frame, rows, ["The answer is \\boxed{-1}."] * len(rows), None)[1]
    assert wrong.tolist() == [0.0] * len(rows)
