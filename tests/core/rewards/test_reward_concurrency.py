"""Rewards under verl's concurrency: many threads of one process, and several processes, at once.

verl 0.9.1's ``RewardLoopWorker`` (one Ray actor process per ``reward.num_workers``) scores its chunk with
``asyncio.gather`` over ``NaiveRewardManager.run_single``, which runs the synchronous ``compute_score`` through
``loop.run_in_executor(None, ...)``: a thread pool. The test drives verl's own reward manager that way, with answers
that tell the callers apart, so a score handed to the wrong caller (or an error) shows.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[3]


def _tokenizer():
    """A byte-level tokenizer (exact decode round trip) trained in memory: no download."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    raw = ByteLevelBPETokenizer()
    raw.train_from_iterator(["The answer is \\boxed{1234}.", "#### 56"], vocab_size=300, min_frequency=1,
                            special_tokens=["<pad>"])
    return PreTrainedTokenizerFast(tokenizer_object=raw._tokenizer, pad_token="<pad>")


def _items(n: int, offset: int) -> tuple[list[str], list[str], list[float]]:
    """Distinguishable items: item i's gold is its own number; even items answer right, odd items off by one.
    Decimals, so that every item goes through the verifier pool (plain integers are compared without it)."""
    solutions, golds, expected = [], [], []
    for i in range(n):
        value = 1000 + offset + i
        solutions.append(f"Work. The answer is \\boxed{{{value if i % 2 == 0 else value + 1}.5}}.")
        golds.append(f"steps #### {value}.5")
        expected.append(1.0 if i % 2 == 0 else 0.0)
    return solutions, golds, expected


def score_through_verl(n: int, offset: int, threads: int) -> tuple[list[float], list[float], list[dict]]:
    """verl's ``NaiveRewardManager.run_single`` for ``n`` rollouts gathered at once, the executor ``threads`` wide."""
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    tokenizer = _tokenizer()
    config = OmegaConf.create({"reward": {"custom_reward_function": {"path": "pkg://pipeline_lib.core.rewards",
                                                                     "name": "compute_score"}}})
    manager = NaiveRewardManager(config, tokenizer, compute_score=get_custom_reward_fn(config))
    manager.loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(threads))
    solutions, golds, expected = _items(n, offset)
    items = []
    for solution, gold in zip(solutions, golds, strict=True):
        answer = torch.tensor(tokenizer(solution, add_special_tokens=False)["input_ids"])
        prompt = torch.tensor([0, 0])
        items.append(DataProto.from_dict(
            tensors={"prompts": prompt[None], "responses": answer[None],
                     "attention_mask": torch.ones(len(prompt) + len(answer), dtype=torch.long)[None]},
            non_tensors={"data_source": np.array(["openai/gsm8k"], dtype=object),
                         "reward_model": np.array([{"ground_truth": gold}], dtype=object),
                         "extra_info": np.array([{}], dtype=object)}))

    async def gather() -> list[dict]:  # as verl's RewardLoopWorker.compute_score_batch does
        return await asyncio.gather(*(manager.run_single(item) for item in items))

    results = manager.loop.run_until_complete(gather())
    return [r["reward_score"] for r in results], expected, [r["reward_extra_info"] for r in results]


def test_math_reward_from_many_threads_returns_each_caller_its_own_score():
    scores, expected, extra = score_through_verl(64, 0, threads=8)
    assert scores == expected
    assert all(e["timeouts"] == 0.0 and e["failures"] == 0.0 for e in extra)


@pytest.mark.slow
def test_math_reward_from_several_processes_with_threads_each():
    context = mp.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        runs = list(pool.map(score_through_verl, [32, 32], [0, 500], [6, 6]))
    for scores, expected, _ in runs:
        assert scores == expected


def test_every_registered_reward_is_thread_safe():
    """Every scorer of the registry gives each of many concurrent threads the result it gives alone."""
    from pipeline_lib.core.rewards import available_rewards, score

    cases = {
        "math": [(f"\\boxed{{{v}.5}}", f"{v + (v % 2)}.5") for v in range(24)],  # decimals: through the pool
        "countdown": [(f"<answer>{a} + {b}</answer>", {"numbers": [a, b], "target": a + b + (a % 2)})
                      for a, b in zip(range(1, 25), range(30, 54), strict=True)],
        "similarity": [(f"the cat number {v} sat", f"the cat number {v + (v % 3)} sat on a mat") for v in range(24)],
        "format": [(f"<think>{v}</think><answer>{v}</answer>" if v % 2 else f"{v}", None) for v in range(24)],
        "exact": [(f"<answer>{v}</answer>", str(v + (v % 2))) for v in range(24)],
    }
    assert sorted(cases) == available_rewards()
    for name, pairs in cases.items():
        alone = [score(name, s, t) for s, t in pairs]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda pair, n=name: score(n, *pair), pairs))
        assert together == alone, name
        assert len({r["score"] for r in alone}) > 1, name  # the cases tell callers apart


def score_decimals(offset: int) -> list[float]:
    """Decimals (through the verifier pool, not the integer shortcut): right, then wrong."""
    from pipeline_lib.core.rewards import score

    return [score("math", f"\\boxed{{{offset}.5}}", f"{offset}.5")["score"],
            score("math", f"\\boxed{{{offset}.25}}", f"{offset}.5")["score"]]


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_math_reward_inside_a_multiprocessing_pool_worker(start_method):
    """multiprocessing.Pool workers are daemonic, and daemonic processes may not start children."""
    with mp.get_context(start_method).Pool(2) as pool:
        assert pool.map(score_decimals, [1, 2, 3]) == [[1.0, 0.0]] * 3


def test_math_reward_in_forked_workers_after_the_parent_scored():
    """A forked child inherits the parent's verifier pool object (not its threads) and fork-server state."""
    assert score_decimals(7) == [1.0, 0.0]  # the parent's pool is up
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as pool:
        assert list(pool.map(score_decimals, [1, 2, 3])) == [[1.0, 0.0]] * 3
    assert score_decimals(8) == [1.0, 0.0]  # and the parent's still works


def test_math_reward_from_plain_threads_and_a_forked_child_at_once():
    """Threads scoring while another thread forks: the child gets its own pool, the threads keep theirs."""
    def fork_and_score() -> list[float]:
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=mp.get_context("fork")) as pool:
            return pool.submit(score_decimals, 5).result(timeout=120)

    with concurrent.futures.ThreadPoolExecutor(4) as threads:
        scored = [threads.submit(score_decimals, offset) for offset in range(6)]
        forked = threads.submit(fork_and_score)
        assert [f.result(timeout=120) for f in scored] == [[1.0, 0.0]] * 6
        assert forked.result(timeout=120) == [1.0, 0.0]


SCRIPT = """\
from pipeline_lib.core.rewards import score

print("RESULT", score("math", "so \\\\boxed{42.5}", "42.5")["score"], score("math", "\\\\boxed{41.5}", "42.5")["score"])
"""


def test_math_reward_from_a_plain_script_without_main_guard(tmp_path):
    """A student's script calling ``score("math", ...)`` at top level (no ``__main__`` guard) just works."""
    script = tmp_path / "check_answers.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("RESULT") == 1, done.stdout  # the script ran once: no worker re-ran it
    assert "RESULT 1.0 0.0" in done.stdout


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])


def die_with(*_args) -> None:
    """A verifier that crashes its worker (as an out-of-memory kill would)."""
    os._exit(3)


def raise_with(*_args) -> None:
    raise MemoryError("verifier blew up")


def test_a_dead_or_raising_verifier_is_a_counted_failure_never_a_silent_wrong_answer():
    from pipeline_lib.core.rewards import health_counts, mathverify, reward_health, score_batch
    from pipeline_lib.core.rewards.pool import TimeoutPool

    for target, error in (("tests.core.rewards.test_reward_concurrency:die_with", "worker died"),
                          ("tests.core.rewards.test_reward_concurrency:raise_with", "MemoryError")):
        pool = TimeoutPool(target, processes=1, timeout=5.0)
        try:
            results = pool.map([("a", "b"), ("c", "d")])
            assert all(r.failed and not r.timed_out and error in r.error for r in results)
            assert (pool.failures, pool.timeouts) == (2, 0)
        finally:
            pool.close()
    saved = mathverify._pool
    mathverify._pool = TimeoutPool("tests.core.rewards.test_reward_concurrency:die_with", processes=1, timeout=5.0)
    try:
        before = reward_health()
        results = score_batch("math", ["\\boxed{1.5}", "\\boxed{2.5}"], ["1.5", "2.5"])
        assert [(r["score"], r["failures"], r["timeouts"]) for r in results] == [(0.0, 1.0, 0.0)] * 2
        assert health_counts(results) == {"timeouts": 0, "failures": 2, "unscorable": 0}
        after = reward_health()
        assert (after["failures"] - before["failures"], after["timeouts"] - before["timeouts"]) == (2, 0)
    finally:
        mathverify._pool.close()
        mathverify._pool = saved


def test_report_names_evaluations_with_verifier_timeouts_or_failures():
    import pandas as pd

    from pipeline_lib.paper.reproduction import reward_health_section

    clean = pd.DataFrame({"task": ["gsm8k"], "method": ["grpo_exact"], "seed": [0], "pass@1_greedy": [0.5],
                          "reward_timeouts_greedy": [0], "reward_failures_greedy": [0]})
    assert reward_health_section(clean) == []
    hit = pd.concat([clean, clean.assign(method="softmax_exact", reward_timeouts_greedy=3)])
    section = "\n".join(reward_health_section(hit))
    assert "softmax_exact" in section and "| 3 |" in section and "grpo_exact" not in section


def test_hostile_items_of_one_caller_cannot_starve_another_callers_item():
    """Issue 35 class 7: 8 items at a 1 s limit on 2 workers used to hold an easy item of another thread in the
    queue for 4 limits; served round-robin it waits for at most one limit (the hostile items already running)."""
    import threading
    import time

    from pipeline_lib.core.rewards.pool import TimeoutPool

    limit = 1.0
    pool = TimeoutPool("time:sleep", processes=2, timeout=limit)
    try:
        pool.map([(0,), (0,)])  # workers started
        hostile: list = []
        flood = threading.Thread(target=lambda: hostile.extend(pool.map([(30,)] * 8)))
        flood.start()
        time.sleep(0.2)  # two hostile items running, six queued
        asked = time.monotonic()
        easy = pool.map([(0,)])
        waited = time.monotonic() - asked
        flood.join(timeout=60)
    finally:
        pool.close()
    assert not easy[0].timed_out and not easy[0].failed
    assert waited < 2 * limit, f"the easy item waited {waited:.1f} s behind another caller's hostile items"
    assert len(hostile) == 8 and all(r.timed_out for r in hostile)
