"""Theory artefacts: Fig. 1a/1b, the weight-view table and the verification report.

Two steps, so a plot tweak never recomputes Monte Carlo:

``compute``
    Monte Carlo curves (mean |A| and update weight per pass rate), exact
    population weights, the weight-view numbers and every verification check.
``render``
    Figures and tables from the ``compute`` CSVs only.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline_lib import theory
from pipeline_lib.io import atomic_path, save_figure, write_json, write_text
from pipeline_lib.paper.tables import write_table
from pipeline_lib.provenance import write_provenance
from pipeline_lib.theory_checks import VerificationSpec, run_checks

log = logging.getLogger("pipeline_lib.paper.theory")

#: Objectives of Fig. 1 and the weight-view table, in the paper's order.
OBJECTIVES = ("reinforce", "ml", "grpo", "maxrl", "softmax")
LABELS = {"reinforce": "REINFORCE", "ml": "ML", "grpo": "GRPO", "maxrl": "MaxRL", "softmax": "SoftmaxGRPO"}
FORMULAS_TEXT = {
    "reinforce": "1",
    "ml": "1/p",
    "grpo": "1/sqrt(p(1-p))",
    "maxrl": "(1-(1-p)^T)/p",
    "softmax": "E_{S~Bin(M-1,p)}[Delta_S]; large M: (e^{1/tau}-1)/(1-p+pe^{1/tau})",
}
FORMULAS = {
    "reinforce": r"$1$",
    "ml": r"$\frac{1}{p}$",
    "grpo": r"$\frac{1}{\sqrt{p(1-p)}}$",
    "maxrl": r"$\frac{1-(1-p)^T}{p}$",
    "softmax": r"$\mathbb{E}_{S}[\Delta_S^{(\tau)}] \approx \frac{e^{1/\tau}-1}{1-p+pe^{1/\tau}}$",
}
GEOMETRY = {
    "reinforce": "Uniform weighting over prompt difficulty.",
    "ml": "Train-on-successes geometry; strongly emphasizes hard prompts.",
    "grpo": "Blows up on both very hard and already-easy prompts.",
    "maxrl": "Truncated ML weighting; caps the hard-prompt blow-up for finite T.",
    "softmax": "REINFORCE-to-MaxRL interpolation at finite M; finite as p approaches 1.",
}
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
            mc = theory.omega_monte_carlo(name, spec.group_size, float(p), spec.mc_groups, spec.seed + offset, tau=tau)
            rows.append({"method": name, "tau": tau, "p": float(p), **mc})
    return pd.DataFrame(rows)


def population_weights(spec: TheorySpec, points: int = 201) -> pd.DataFrame:
    grid = np.linspace(0.0, 1.0, points)
    rows = []
    for name, tau in _variants(spec):
        values = theory.weight_function(name, spec.group_size, tau)(grid)
        rows += [{"method": name, "tau": tau, "p": float(p), "omega": float(v)}
                 for p, v in zip(grid, values, strict=True)]
    return pd.DataFrame(rows)


def weight_view(spec: TheorySpec) -> pd.DataFrame:
    """omega at a few pass rates, each divided by omega(0.5): only the shape matters."""
    rows = []
    for name, tau in _variants(spec):
        fn = theory.weight_function(name, spec.group_size, tau)
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
        "Each row compares a closed form from `pipeline_lib.theory` with an independent computation.",
        "",
        "| equation | claim | independent check | error | tolerance | result |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| `{r['equation']}` | {r['claim']} | {r['method']} | {r['error']:.3g} | "
                     f"{r['tolerance']:.3g} | {'pass' if r['passed'] else '**FAIL**'} |")
    return "\n".join(lines) + "\n"


def _write_csv(frame: pd.DataFrame, path: str) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


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


def _has_tau(tau: float | None) -> bool:
    return tau is not None and not math.isnan(tau)


def _style(method: str, tau: float | None, taus: list[float]) -> dict[str, Any]:
    """Baselines in greys/red with distinct dashes; SoftmaxGRPO temperatures along a colour map."""
    if method == "softmax":
        import matplotlib

        shade = taus.index(tau) / max(1, len(taus) - 1)
        return {"label": f"SoftmaxGRPO (tau={tau:g})", "color": matplotlib.colormaps["viridis"](0.85 * shade),
                "linewidth": 1.8}
    styles = {"reinforce": ("0.45", ":"), "ml": ("black", "-"), "grpo": ("tab:red", "--"), "maxrl": ("black", "-.")}
    color, dash = styles[method]
    # MaxRL(T = M-1) coincides with low-tau SoftmaxGRPO, so it is drawn on top.
    return {"label": LABELS[method], "color": color, "linestyle": dash, "linewidth": 1.4,
            "zorder": 5 if method == "maxrl" else 2}


def render(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    started = time.time()
    curves = pd.read_csv(args.curves)
    weights = pd.read_csv(args.weights)
    view = pd.read_csv(args.weight_view)
    group_size = args.group_size

    taus = sorted(float(t) for t in curves["tau"].dropna().unique())
    fig, ax = plt.subplots(figsize=(7, 4))
    for (method, tau), frame in curves.groupby(["method", "tau"], dropna=False, sort=False):
        style = _style(method, tau, taus)
        ax.plot(frame["p"], frame["mean_abs_advantage"], **style)
        ax.fill_between(frame["p"], frame["mean_abs_advantage"] - 2 * frame["mean_abs_advantage_se"],
                        frame["mean_abs_advantage"] + 2 * frame["mean_abs_advantage_se"],
                        color=style["color"], alpha=0.2, linewidth=0)
    ax.set(xlabel="pass rate p", ylabel="mean |A| (Monte Carlo, ±2 SE)", yscale="log",
           title=f"(a) Mean absolute advantage, M = {group_size} binary rollouts")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    save_figure(fig, args.fig1a_png, args.fig1a_pdf, dpi=160)

    fig, ax = plt.subplots(figsize=(7, 4))
    for (method, tau), frame in weights.groupby(["method", "tau"], dropna=False, sort=False):
        at_half = float(np.interp(0.5, frame["p"], frame["omega"]))
        finite = np.isfinite(frame["omega"])
        ax.plot(frame["p"][finite], frame["omega"][finite] / at_half, **_style(method, tau, taus))
    ax.set(xlabel="pass rate p", ylabel="w(p) / w(0.5)", yscale="log", ylim=(0.3, 30),
           title=f"(b) Population prompt weights, M = {group_size}")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    save_figure(fig, args.fig1b_png, args.fig1b_pdf, dpi=160)

    value_columns = [c for c in view.columns if c.startswith("omega(")]

    def fmt(value: float) -> str:
        return "inf" if math.isinf(value) else f"{value:.3g}"

    rows = []
    for _, row in view.iterrows():
        method = row["method"]
        name = LABELS[method] + (f" (tau={row['tau']:g})" if method == "softmax" else "")
        name += f" (T={group_size - 1})" if method == "maxrl" else ""
        rows.append({"Objective": name, "Weight w(p)": FORMULAS_TEXT[method],
                     **{c: fmt(float(row[c])) for c in value_columns}, "Geometry": GEOMETRY[method]})
    table = pd.DataFrame(rows)
    latex = table.copy()
    latex["Weight w(p)"] = [FORMULAS[m] for m in view["method"]]
    latex[value_columns] = latex[value_columns].replace("inf", r"$\infty$")
    latex.columns = ["Objective", r"Weight $\omega(p)$",
                     *[rf"$\omega({c[6:c.index(')')]})/\omega(0.5)$" for c in value_columns], "Geometry"]
    caption = (f"Prompt-weighting view of binary-reward objectives (weights divided by their value at p = 0.5; "
               f"SoftmaxGRPO exact at M = {group_size}, MaxRL with T = M - 1).")
    paths = write_table(table, Path(args.table_stem), caption, "tab:weight_view", latex_frame=latex,
                        raw_columns=list(latex.columns[1:-1]),
                        column_format="l c " + "c" * len(value_columns) + " p{5.5cm}")
    write_provenance([args.fig1a_png, args.fig1a_pdf, args.fig1b_png, args.fig1b_pdf, *paths],
                     step="paper_theory", inputs=[args.curves, args.weights, args.weight_view],
                     params={"group_size": group_size}, started_at=started)
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m pipeline_lib.paper.theory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compute", help="Monte Carlo curves, exact weights and verification checks")
    c.add_argument("--spec", required=True, help="JSON of the config's `theory` section")
    c.add_argument("--seed", type=int, required=True)
    c.add_argument("--config-sha256", default=None)
    c.add_argument("--strict", action=argparse.BooleanOptionalAction, default=True,
                   help="exit non-zero when a verification check fails (the report is in the log)")
    for name in ("curves", "weights", "weight-view", "verification-json", "verification-md"):
        c.add_argument(f"--{name}", required=True)
    r = sub.add_parser("render", help="figures and tables from the compute step's CSVs")
    r.add_argument("--group-size", type=int, required=True)
    for name in ("curves", "weights", "weight-view", "fig1a-png", "fig1a-pdf", "fig1b-png", "fig1b-pdf",
                 "table-stem"):
        r.add_argument(f"--{name}", required=True)
    args = parser.parse_args(argv)
    return compute(args) if args.command == "compute" else render(args)


if __name__ == "__main__":
    sys.exit(main())
