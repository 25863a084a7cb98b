"""Tiny-task split sizes beyond the task's distinct prompts (issue 45; pipeline_lib.core.data.tiny): the data
build stops naming the key and how many distinct prompts there are, where it used to draw forever. A row of
docs/hostile_cases.md."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("split, size", [("n_val", 5000), ("n_test", 5000), ("n_train", 5000)])
def test_split_sizes_beyond_the_tasks_distinct_prompts_are_an_error_naming_the_key(split, size):
    """countdown_tiny with 3 numbers up to 4 has a few hundred distinct prompts: asking for more once looped forever."""
    from pipeline_lib.core.data.tiny import generate_task

    spec = {"n_train": 10, "n_test": 10, "n_val": 0, "imperfect_fraction": 0.0, "numbers_per_task": [3],
            "max_number": 4, "max_target": 100, split: size}
    with pytest.raises(ValueError, match=rf"data\.tiny\.{split}: countdown_tiny has only about \d+ distinct prompts"):
        generate_task("countdown_tiny", spec, 0)
    ok = {**spec, split: 10}
    assert len(generate_task("countdown_tiny", ok, 0)["rl_test"]) == 10
