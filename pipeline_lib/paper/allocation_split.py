"""The paper's statements on the gradient-allocation table (Sec. 5.3), and how much of a shift is the estimator's
arithmetic rather than a change in what training visits.

Each statement (:data:`ALLOCATION_CLAIMS`) says SoftmaxGRPO-Exact puts more (or less) of its budget sum_i T_i |A_i|
than GRPO-Exact on prompts whose pass rate p lies in a range; p is measured over the prompt's other visits
(:func:`pipeline_lib.paper.results.allocation_bins`). SoftmaxGRPO-Exact's share minus GRPO-Exact's splits exactly into

* **the estimator's arithmetic**: GRPO-Exact's own rollouts re-weighted with the softmax run's estimator (the
  advantage registry, :func:`pipeline_lib.core.rl.advantages.group_advantages`, on the logged rewards) minus GRPO's
  weights on them -- the shift with the visited groups (and their p) held fixed;
* **what training visits**: the softmax run's own rollouts minus GRPO-Exact's rollouts, both weighted by the
  softmax estimator -- the shift that comes from training reaching different groups.

Each part is paired by seed with :func:`pipeline_lib.core.stats.paired_interval` (one number per run: seeds only).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline_lib.core.provenance import SIDECAR_SUFFIX
from pipeline_lib.core.stats import PairedDifference, paired_interval
from pipeline_lib.paper.results import METHOD_LABELS, PASS_RATE_BINS, allocation_bins, bin_names
from pipeline_lib.paper.tables import to_markdown
from pipeline_lib.plan.runs import RunId

__all__ = ["ALLOCATION_CLAIMS", "AllocationClaim", "allocation_split", "bin_names", "claim_share", "run_advantage"]


@dataclass(frozen=True)
class AllocationClaim:
    """One statement of the paper on its Table 3: on its ``column`` (a paper task), SoftmaxGRPO puts more
    (``more``) or less of its gradient budget than GRPO on prompts with ``low <= p < high`` (``high`` 1 includes 1)."""

    column: str
    low: float
    high: float
    more: bool

    @property
    def bins(self) -> list[int]:
        """The :data:`PASS_RATE_BINS` the range covers (its edges are bin edges)."""
        inside = [i for i, (lo, hi) in enumerate(PASS_RATE_BINS) if lo >= self.low and hi <= self.high]
        if not inside or PASS_RATE_BINS[inside[0]][0] != self.low or PASS_RATE_BINS[inside[-1]][1] != self.high:
            raise ValueError(f"allocation claim range [{self.low:g}, {self.high:g}) is not a union of pass-rate bins")
        return inside

    @property
    def name(self) -> str:
        if self.high == PASS_RATE_BINS[-1][1]:
            return f"p >= {self.low:g}"
        return f"p < {self.high:g}" if self.low == 0 else f"{self.low:g} <= p < {self.high:g}"

    def statement(self, a: str = "softmax_exact", b: str = "grpo_exact") -> str:
        word = "more" if self.more else "less"
        return (f"{METHOD_LABELS.get(a, a)} puts {word} of its gradient budget than {METHOD_LABELS.get(b, b)} on "
                f"prompts with {self.name} (Table 3)")


#: The paper's statements (abstract, Sec. 5.3, conclusion): GSM8K, p >= 0.9 (10.0% vs 36.4%) and [0.2, 0.9) (82.7% vs
#: 58.9%); Countdown, p < 0.5 (46.7% vs 32.4%) and p >= 0.9 (5.1% vs 9.6%). Their numbers are read from
#: config/paper_reference.yaml's table, never typed here.
ALLOCATION_CLAIMS = (AllocationClaim("gsm8k", 0.9, 1.0, more=False), AllocationClaim("gsm8k", 0.2, 0.9, more=True),
                     AllocationClaim("countdown", 0.0, 0.5, more=True),
                     AllocationClaim("countdown", 0.9, 1.0, more=False))


def claim_share(values: Sequence[float], claim: AllocationClaim) -> float:
    """The share of the binned budget (``values``: one total per bin) in the claim's range; NaN when nothing is
    binned."""
    values = np.asarray(values, dtype=float)
    return float(values[claim.bins].sum() / values.sum()) if values.sum() > 0 else float("nan")


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


def _share(bins: dict[str, float], claim: AllocationClaim) -> float:
    return claim_share([bins[f"bin{i}"] for i in range(len(PASS_RATE_BINS))], claim)


def allocation_split(rollouts: Mapping[str, RunId], claims: Sequence[tuple[str, AllocationClaim]],
                     a: str = "softmax_exact", b: str = "grpo_exact") -> pd.DataFrame:
    """Per (task, claim) of ``claims`` and part (``arithmetic``, ``visits``; they add up to the total shift): the
    difference in the claim's share, a minus b, paired by seed, over the seeds where both runs have rollouts and
    binned gradient (``rollouts``: each run's ``rollouts.jsonl`` -> the run, handed over by the plan; runs pair by
    their task and seed fields)."""
    written = {(run.task, run.name, run.seed): Path(path) for path, run in rollouts.items() if Path(path).is_file()}
    rows = []
    for task, claim in claims:
        shares: dict[str, list[float]] = {"aa": [], "ab": [], "bb": []}
        for (_, _, seed_k), run_a in sorted(((k, p) for k, p in written.items() if k[:2] == (task, a)),
                                            key=lambda item: item[1]):
            run_b = written.get((task, b, seed_k))
            if run_b is None:
                continue
            seed = {"aa": _share(allocation_bins(run_a), claim),
                    "ab": _share(allocation_bins(run_b, run_advantage(run_a.parent)), claim),
                    "bb": _share(allocation_bins(run_b), claim)}
            if all(np.isfinite(v) for v in seed.values()):
                for key, value in seed.items():
                    shares[key].append(value)
        for part, (x, y) in {"arithmetic": ("ab", "bb"), "visits": ("aa", "ab")}.items():
            result = paired_interval(shares[x], shares[y]) if shares[x] else None
            rows.append({"task": task, "claim": claim.name, "part": part, "result": result,
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
        rows.append({"Task": r.task, "Range": r.claim, "Part": meaning[r.part],
                     "Share before -> after": f"{100 * r.share_before:.1f}% -> {100 * r.share_after:.1f}%"
                     if result else "–",
                     "Shift [95% CI] (points)": result.format(scale=100, with_method=True) if result else "–"})
    return to_markdown(pd.DataFrame(rows))
