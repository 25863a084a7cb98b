"""What the gradient-allocation comparison can say: which bins a configuration can fill, and how much of the shift
is the estimator's arithmetic rather than a change in what training visits.

SoftmaxGRPO-Exact's share of sum_i T_i |A_i| on hard groups (pass rate < 0.5) minus GRPO-Exact's splits exactly into

* **the estimator's arithmetic**: GRPO-Exact's own rollouts re-weighted with the softmax run's estimator (the
  advantage registry, :func:`pipeline_lib.core.rl.advantages.group_advantages`, on the logged rewards) minus GRPO's
  weights on them -- the shift with the visited groups held fixed;
* **what training visits**: the softmax run's own rollouts minus GRPO-Exact's rollouts, both weighted by the
  softmax estimator -- the shift that comes from training reaching different groups.

Each part is paired by seed with :func:`pipeline_lib.core.stats.paired_interval` (one number per run: seeds only).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline_lib.core.provenance import SIDECAR_SUFFIX
from pipeline_lib.core.stats import PairedDifference, paired_interval
from pipeline_lib.paper.results import METHOD_LABELS, PASS_RATE_BINS, allocation_bins
from pipeline_lib.paper.tables import to_markdown
from pipeline_lib.plan.runs import RunId

__all__ = ["HARD_BINS", "allocation_split", "bin_names", "run_advantage", "unfillable_bins"]

#: Gradient-allocation bins counted as "hard" (group pass rate below 0.5).
HARD_BINS = [i for i, (_, high) in enumerate(PASS_RATE_BINS) if high <= 0.5]


def bin_names() -> list[str]:
    return [f"[{lo:g},{hi:g})" if i < len(PASS_RATE_BINS) - 1 else f"[{lo:g},{hi:g}]"
            for i, (lo, hi) in enumerate(PASS_RATE_BINS)]


def unfillable_bins(group_size: int, binary_reward: bool) -> dict[int, str]:
    """Bins no group can put gradient in, with the reason: with 0/1 rewards equal to correctness, a group's
    advantages are 0 unless 0 < k < M of its M rollouts are correct, so a bin holding no such k/M stays empty
    whatever training does. Nothing is unfillable when rewards are graded or the group size varies (0)."""
    if not binary_reward or group_size < 2:
        return {}
    names = bin_names()
    out = {}
    for i, (low, high) in enumerate(PASS_RATE_BINS):
        last = i == len(PASS_RATE_BINS) - 1
        inside = [k for k in range(group_size + 1) if low <= k / group_size < high or (last and k == group_size)]
        if not any(0 < k < group_size for k in inside):
            held = {0: "all wrong", group_size: "all correct"}
            what = " or ".join(f"{held[k]} ({k}/{group_size})" for k in inside) or "no group at all"
            out[i] = (f"with M = {group_size} and 0/1 rewards, a pass rate in {names[i]} means {what}; such groups "
                      "have advantage 0 under every estimator, so this bin cannot hold gradient: a property of M and "
                      f"the reward, not of this run or its scale (every run with M = {group_size} and 0/1 rewards "
                      "leaves it empty, the paper plan's runs with that M included)")
    return out


def run_advantage(run_dir: Path) -> tuple[str, dict]:
    """The advantage estimator (registry name, parameters) a finished RL run trained with, from the spec its
    ``DONE.json`` provenance records (local engine: the trainer's ``advantage`` / ``advantage_params``; verl: the
    run spec's ``estimator``)."""
    sidecar = run_dir / ("DONE.json" + SIDECAR_SUFFIX)
    try:
        spec = json.loads(sidecar.read_text())["params"]["spec"]
        estimator = spec["estimator"] if "estimator" in spec else {"name": spec["advantage"],
                                                                    "params": spec.get("advantage_params") or {}}
        name = estimator["name"]
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as error:
        raise ValueError(f"{sidecar}: no advantage in its params.spec ({error!r}); cannot re-weight with it") from None
    return name, dict(estimator["params"])


def _hard_share(bins: dict[str, float]) -> float:
    values = np.array([bins[f"bin{i}"] for i in range(len(PASS_RATE_BINS))])
    return float(values[HARD_BINS].sum() / values.sum()) if values.sum() > 0 else float("nan")


def allocation_split(rollouts: Mapping[str, RunId], tasks: list[str], a: str = "softmax_exact",
                     b: str = "grpo_exact") -> pd.DataFrame:
    """Per task and part (``arithmetic``, ``visits``; they add up to the total shift): the hard-share difference
    paired by seed, over the seeds where both runs have rollouts and gradient signal (``rollouts``: each run's
    ``rollouts.jsonl`` -> the run, handed over by the plan; runs pair by their task and seed fields)."""
    written = {(run.task, run.name, run.seed): Path(path) for path, run in rollouts.items() if Path(path).is_file()}
    rows = []
    for task in tasks:
        shares: dict[str, list[float]] = {"aa": [], "ab": [], "bb": []}
        for (_, _, seed_k), run_a in sorted(((k, p) for k, p in written.items() if k[:2] == (task, a)),
                                            key=lambda item: item[1]):
            run_b = written.get((task, b, seed_k))
            if run_b is None:
                continue
            seed = {"aa": _hard_share(allocation_bins(run_a)),
                    "ab": _hard_share(allocation_bins(run_b, run_advantage(run_a.parent))),
                    "bb": _hard_share(allocation_bins(run_b))}
            if all(np.isfinite(v) for v in seed.values()):
                for key, value in seed.items():
                    shares[key].append(value)
        for part, (x, y) in {"arithmetic": ("ab", "bb"), "visits": ("aa", "ab")}.items():
            result = paired_interval(shares[x], shares[y]) if shares[x] else None
            rows.append({"task": task, "part": part, "result": result,
                         "share_before": float(np.mean(shares[y])) if shares[y] else None,
                         "share_after": float(np.mean(shares[x])) if shares[x] else None})
    return pd.DataFrame(rows)


def split_section(split: pd.DataFrame, a: str = "softmax_exact", b: str = "grpo_exact") -> str:
    """The split as a markdown table, each part with its interval and the interval's method."""
    label_a, label_b = METHOD_LABELS.get(a, a), METHOD_LABELS.get(b, b)
    meaning = {"arithmetic": f"estimator's arithmetic: {label_b}'s own rollouts, {label_a}'s weights − its own",
               "visits": f"what training visits: {label_a}'s rollouts − {label_b}'s, both with {label_a}'s weights"}
    rows = []
    for r in split.itertuples():
        result: PairedDifference | None = r.result
        rows.append({"Task": r.task, "Part": meaning[r.part],
                     "Hard share before -> after": f"{100 * r.share_before:.1f}% -> {100 * r.share_after:.1f}%"
                     if result else "–",
                     "Shift [95% CI] (points)": result.format(scale=100, with_method=True) if result else "–"})
    return to_markdown(pd.DataFrame(rows))
