"""The reproduction report's account of the miniature: what the tiny tasks plant, where the gains sit, what it can show.

The tiny tasks (:mod:`pipeline_lib.core.data.tiny`) are built so RL has something to fix: the expert's demonstrations
slip
(``data.tiny.imperfect_fraction`` of prompts, ``blind_spot_slip`` on a blind spot the prompt reveals), SFT imitates
the slip, and a verifier reward can unlearn it. A reader of an "RL improves on SFT" verdict needs to know that, and
where the gain is; this module writes that next to the results: the planted design read from the run's own data
(each test row's ``extra_info["blind_spot"]``, set by the data code, and the spec in the data manifest), every
RL − SFT comparison split into blind-spot and other prompts with the report's own paired comparison
(:func:`pipeline_lib.paper.reproduction.compare`), and which of the paper's claims such a run can and cannot test.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline_lib.core.data.tiny import BLIND_SPOTS
from pipeline_lib.paper.results import METHOD_LABELS
from pipeline_lib.paper.tables import to_markdown
from pipeline_lib.plan.registry import METHODS

__all__ = ["CLAIMS_IT_CANNOT_TEST", "CLAIMS_IT_CAN_TEST", "Planted", "load_planted", "miniature_section",
           "planted_limits"]

#: What a miniature run can speak to, and why (shown in the report as written).
CLAIMS_IT_CAN_TEST = (
    "whether RL with a verifier (or a similarity reward) unlearns a systematic error of its SFT start that sampling "
    "already avoids, on held-out prompts: a controlled version of the paper's RL − SFT rows, with the error known",
    "whether SoftmaxGRPO and GRPO differ when everything else is paired (same SFT start, seeds, data order and test "
    "prompts): the paper's SoftmaxGRPO − GRPO rows, at this scale",
    "how the softmax weights move the gradient budget across pass-rate bins on this run's own rollouts (the "
    "gradient-allocation table), at this model size, and the paper's theory (Fig. 1a, the weight view)",
)
#: What a run with planted tasks cannot speak to because the tasks are planted; what it cannot say for want of a model
#: size, a benchmark, a judge or human ratings is derived from the run's contents
#: (:func:`pipeline_lib.paper.contents.cannot_say`), never listed here.
CLAIMS_IT_CANNOT_TEST = (
    "the paper's absolute accuracies: these tasks are synthetic prompts with a planted error, not GSM8K, Countdown "
    "or DeepMath",
    "whether the paper's gains come from the same mechanism: here the room RL improves in was planted (the blind "
    "spot the report's section on the planted design describes); a pretrained model has no planted error, and "
    "nothing here says how large its room is",
)


def planted_limits(planted: Mapping[str, Any]) -> list[str]:
    """What the run cannot say because of its planted tasks (``planted``: :func:`load_planted`'s), naming them; empty
    for a run without planted tasks (the paper plan's)."""
    if not planted:
        return []
    tasks = ", ".join(f"`{task}`" for task in sorted(planted))
    return [f"{claim} ({tasks})" for claim in CLAIMS_IT_CANNOT_TEST]


@dataclass(frozen=True)
class Planted:
    """One tiny task's planted design, read from its generated test split and data manifest."""

    task: str
    blind_spot: pd.Series  # bool per test prompt, indexed by prompt_index (the row of rl_test.parquet)
    spec: dict[str, Any]  # data.tiny as the data step ran it (imperfect_fraction, blind_spot_slip, ...)


def load_planted(test_splits: Mapping[str, Path]) -> dict[str, Planted]:
    """Each tiny task's test split (``test_splits``: task -> ``rl_test.parquet``, handed over by the plan) -> its
    blind-spot membership and data spec (from ``manifest.json`` beside it). Other tasks (a real dataset has no
    planted blind spot) are skipped."""
    out = {}
    for task, path in test_splits.items():
        path = Path(path)
        if task not in BLIND_SPOTS:
            continue
        frame = pd.read_parquet(path, columns=["extra_info"])
        try:
            flags = [bool(dict(extra)["blind_spot"]) for extra in frame["extra_info"]]
        except KeyError:
            raise KeyError(f"{path}: extra_info has no 'blind_spot' (data made before the blind spot was recorded "
                           "per row; rerun the data step)") from None
        manifest = path.with_name("manifest.json")
        try:
            spec = json.loads(manifest.read_text())["source"]["spec"]
        except (OSError, KeyError) as error:
            raise ValueError(f"{manifest}: no data spec (source.spec) for {task}: {error}") from None
        out[task] = Planted(task, pd.Series(flags, index=pd.RangeIndex(len(flags), name="prompt_index")), spec)
    return out


def _subset(scores: Mapping[tuple[str, str, int], Mapping[str, pd.Series]], task: str,
            prompts: pd.Index) -> dict[tuple[str, str, int], dict[str, pd.Series]]:
    """Every run of ``task`` with its per-prompt scores restricted to ``prompts``."""
    return {key: {metric: values.loc[values.index.intersection(prompts)] for metric, values in per.items()}
            for key, per in scores.items() if key[0] == task}


def _mean(scores: Mapping[tuple[str, str, int], Mapping[str, pd.Series]], task: str, method: str,
          metric: str) -> float | None:
    values = [per[metric].mean() for (t, m, _), per in scores.items() if t == task and m == method and metric in per]
    return float(np.mean(values)) if values else None


def _pct(value: float | None) -> str:
    return "–" if value is None or pd.isna(value) else f"{100 * value:.1f}"


def _plant_text(planted: Mapping[str, Planted]) -> list[str]:
    lines = []
    for task, plant in sorted(planted.items()):
        spec, spot = plant.spec, BLIND_SPOTS[task]
        slip = spec.get("blind_spot_slip")
        slip = spec["imperfect_fraction"] if slip is None else slip
        majority = (" More often than not there, so SFT imitates the slip even greedily while sampling still finds "
                    "the full solution." if slip > 0.5 else "")
        lines.append(f"- `{task}`: the expert {spot.slip} on {100 * spec['imperfect_fraction']:.0f}% of prompts "
                     f"(`data.tiny.imperfect_fraction`) and on {100 * slip:.0f}% of its blind spot "
                     f"(`data.tiny.blind_spot_slip`), the prompts where {spot.description}: "
                     f"{int(plant.blind_spot.sum())} of the {len(plant.blind_spot)} test prompts.{majority}")
    return lines


def _is_start(name: str) -> bool:
    return name in METHODS and METHODS[name].starting_point


def miniature_section(planted: Mapping[str, Planted], scores: Mapping[tuple[str, str, int], Mapping[str, pd.Series]],
                      compare: Callable[..., Any], pairs: Iterable[tuple[str, str]], metrics: Mapping[str, str]
                      ) -> list[str]:
    """The report's section on the planted design: what each tiny task plants, each ``(a, b)`` pair of ``pairs`` whose
    ``b`` is the start the methods train from (a gain over the SFT start; the registry entry's
    :attr:`~pipeline_lib.plan.registry.Method.starting_point`) split into blind-spot and other test prompts with
    ``compare`` (the report's paired comparison, called as ``compare(scores, task, a, b, metric)``) for each of
    ``metrics`` (name -> label) the runs have, and what the miniature can and cannot test. Empty when no task has a
    plant."""
    if not planted:
        return []
    runs = {(task, method, metric) for (task, method, _), per in scores.items() for metric in per}
    comparisons = [(task, a, b, metric) for task in sorted(planted) for a, b in dict.fromkeys(pairs)
                   for metric in metrics if _is_start(b) and {(task, a, metric), (task, b, metric)} <= runs]
    parts = ["## What the miniature plants, and where its gains are", "",
             "The tiny tasks are built so RL has a known error to fix (pipeline_lib/core/data/tiny.py): the SFT "
             "demonstrations come from an expert that slips, more often on a blind spot the prompt reveals, and a "
             "reward that checks the answer can unlearn the slip (this run's data settings):", "",
             *_plant_text(planted), "",
             "So an RL − SFT gain in this run is expected to sit on the blind spot. Each comparison with the SFT start "
             "split into blind-spot and other test prompts (points; same seeds and paired interval as above; "
             "levels are means over seeds):", ""]
    rows = []
    for task, a, b, metric in comparisons:
        plant = planted[task]
        evaluated = pd.Index(sorted({i for (t, _, _), per in scores.items() if t == task for values in per.values()
                                     for i in values.index}), name="prompt_index")  # eval.max_prompts may cut
        row = {"Task": task, "Comparison": f"{METHOD_LABELS.get(a, a)} − {METHOD_LABELS.get(b, b)}",
               "Metric": metrics[metric]}
        for name, members in (("Blind spot", plant.blind_spot), ("Other prompts", ~plant.blind_spot)):
            prompts = members.index[members.to_numpy()].intersection(evaluated)
            subset = _subset(scores, task, prompts)
            result = compare(subset, task, a, b, metric).result if len(prompts) else None
            row[f"{name}: prompts"] = len(prompts)
            before, after = _mean(subset, task, b, metric), _mean(subset, task, a, metric)
            row[f"{name}: SFT -> method"] = f"{_pct(before)} -> {_pct(after)}"
            row[f"{name}: difference [95% CI]"] = result.format(scale=100) if result else "–"
        rows.append(row)
    parts += [to_markdown(pd.DataFrame(rows)) if rows else "No comparison with the SFT start on these tasks.", "",
              "What this miniature can test:", "", *(f"- {claim}." for claim in CLAIMS_IT_CAN_TEST), "",
              "What it cannot test because its tasks are planted (the Summary lists what else this run cannot "
              "say, from what it holds):", "", *(f"- {claim}." for claim in CLAIMS_IT_CANNOT_TEST), ""]
    return parts
