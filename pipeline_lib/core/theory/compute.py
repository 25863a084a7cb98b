"""The numbers behind Fig. 1a/1b, the weight-view table and the verification report (rule ``paper_theory_data``).

Monte Carlo curves (mean |A| and update weight per pass rate), exact population weights, the weight-view numbers
and every verification check, written as CSV/JSON/Markdown; :mod:`pipeline_lib.paper.theory` draws the figures and
tables from these files only, so a plot tweak never recomputes Monte Carlo.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipeline_lib.core.cli import entry_parser, json_text
from pipeline_lib.core.io import write_csv_frame, write_json, write_text
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.core.theory import formulas
from pipeline_lib.core.theory.checks import VerificationSpec, run_checks

log = logging.getLogger("pipeline_lib.core.theory.compute")

#: Objectives of Fig. 1 and the weight-view table, in the paper's order (the CSVs' column ``method``, a kept
#: output name, holds them).
OBJECTIVES = ("reinforce", "ml", "grpo", "maxrl", "softmax")
VIEW_POINTS = (0.05, 0.2, 0.8, 0.95, 1.0)


@dataclass(frozen=True)
class TheorySpec:
    """The ``theory`` section of the config (see ``workflow/schemas/config.schema.yaml``)."""

    group_size: int = 8
    taus: tuple[float, ...] = (0.1, 0.3, 1.0, 10.0)
    p_grid_points: int = 49
    mc_groups: int = 20_000
    verification_mc_groups: int = 200_000
    seed: int = 0

    @classmethod
    def from_config(cls, section: dict[str, Any], seed: int) -> TheorySpec:
        return cls(group_size=int(section["group_size"]), taus=tuple(float(t) for t in section["taus"]),
                   p_grid_points=int(section["p_grid_points"]), mc_groups=int(section["mc_groups"]),
                   verification_mc_groups=int(section["verification_mc_groups"]), seed=int(seed))


def _variants(spec: TheorySpec) -> list[tuple[str, float | None]]:
    return [(name, None) for name in OBJECTIVES if name != "softmax"] + [("softmax", tau) for tau in spec.taus]


def monte_carlo_curves(spec: TheorySpec) -> pd.DataFrame:
    """Mean |A| and update weight per pass rate, estimated through the advantage registry."""
    grid = np.linspace(0.0, 1.0, spec.p_grid_points + 2)[1:-1]
    rows = []
    for offset, (name, tau) in enumerate(_variants(spec)):
        for p in grid:
            mc = formulas.omega_monte_carlo(name, spec.group_size, float(p), spec.mc_groups, spec.seed + offset,
                                            tau=tau)
            rows.append({"method": name, "tau": tau, "p": float(p), **mc})
    return pd.DataFrame(rows)


def population_weights(spec: TheorySpec, points: int = 201) -> pd.DataFrame:
    grid = np.linspace(0.0, 1.0, points)
    rows = []
    for name, tau in _variants(spec):
        values = formulas.weight_function(name, spec.group_size, tau)(grid)
        rows += [{"method": name, "tau": tau, "p": float(p), "omega": float(v)}
                 for p, v in zip(grid, values, strict=True)]
    return pd.DataFrame(rows)


def weight_view(spec: TheorySpec) -> pd.DataFrame:
    """omega at a few pass rates, each divided by omega(0.5): only the shape matters."""
    rows = []
    for name, tau in _variants(spec):
        fn = formulas.weight_function(name, spec.group_size, tau)
        at_half = float(fn(0.5))
        row = {"method": name, "tau": tau}
        for p in VIEW_POINTS:
            row[f"omega({p:g})/omega(0.5)"] = float(fn(p)) / at_half
        rows.append(row)
    return pd.DataFrame(rows)


def _verification_markdown(results: list[dict[str, Any]], spec: TheorySpec) -> str:
    passed = sum(r["passed"] for r in results)
    lines = [
        "# Theory verification",
        "",
        f"{passed}/{len(results)} checks passed (group size M = {spec.group_size}, "
        f"{spec.verification_mc_groups} Monte Carlo groups, seed {spec.seed}).",
        "Each row compares a closed form from `pipeline_lib.core.theory` with an independent computation.",
        "",
        "| equation | claim | independent check | error | tolerance | result |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| `{r['equation']}` | {r['claim']} | {r['method']} | {r['error']:.3g} | "
                     f"{r['tolerance']:.3g} | {'pass' if r['passed'] else '**FAIL**'} |")
    return "\n".join(lines) + "\n"


def _write_csv(frame: pd.DataFrame, path: str) -> None:
    write_csv_frame(frame, path)


def compute(args: argparse.Namespace) -> int:
    started = time.time()
    spec = TheorySpec.from_config(json.loads(args.spec), seed=args.seed)
    log.info("Monte Carlo curves: %d variants x %d pass rates x %d groups",
             len(_variants(spec)), spec.p_grid_points, spec.mc_groups)
    _write_csv(monte_carlo_curves(spec), args.curves)
    _write_csv(population_weights(spec), args.weights)
    _write_csv(weight_view(spec), args.weight_view)
    log.info("running %s verification checks", "all")
    results = [r.as_dict() for r in run_checks(VerificationSpec(spec.group_size, spec.verification_mc_groups,
                                                                spec.seed))]
    write_json(args.verification_json, {"spec": {"group_size": spec.group_size, "seed": spec.seed,
                                                 "mc_groups": spec.verification_mc_groups},
                                        "checks": results,
                                        "passed": sum(r["passed"] for r in results), "total": len(results)})
    report = _verification_markdown(results, spec)
    write_text(args.verification_md, report)
    outputs = [args.curves, args.weights, args.weight_view, args.verification_json, args.verification_md]
    write_provenance(outputs, step="paper_theory_data", params={"theory": json.loads(args.spec)},
                     config_sha256=args.config_sha256, seeds={"theory": spec.seed}, started_at=started)
    failed = [r["equation"] for r in results if not r["passed"]]
    sys.stderr.write(report)
    if failed and args.strict:
        log.error("theory verification failed for %s", failed)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, "pipeline_lib.core.theory.compute")
    parser.add_argument("--spec", required=True, type=json_text,
                        help="the config's `theory` section: a JSON file or inline JSON")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--config-sha256", default=None)
    parser.add_argument("--strict", action=argparse.BooleanOptionalAction, default=True,
                        help="exit non-zero when a verification check fails (the report is in the log)")
    for name in ("curves", "weights", "weight-view", "verification-json", "verification-md"):
        parser.add_argument(f"--{name}", required=True)
    return compute(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
