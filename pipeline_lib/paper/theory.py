"""Fig. 1a/1b and the weight-view table, drawn from the CSVs of :mod:`pipeline_lib.core.theory.compute` only.

Pure assembly (rule ``paper_theory``): labels, styles, formulas as text; every number comes from the compute step,
so a plot tweak never recomputes Monte Carlo.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline_lib.core.cli import entry_parser
from pipeline_lib.core.io import read_csv_frame, save_figure
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.paper.tables import write_table

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


def _style(objective: str, tau: float | None, taus: list[float]) -> dict[str, Any]:
    """Baselines in greys/red with distinct dashes; SoftmaxGRPO temperatures along a colour map."""
    if objective == "softmax":
        import matplotlib

        shade = taus.index(tau) / max(1, len(taus) - 1)
        return {"label": f"SoftmaxGRPO (tau={tau:g})", "color": matplotlib.colormaps["viridis"](0.85 * shade),
                "linewidth": 1.8}
    styles = {"reinforce": ("0.45", ":"), "ml": ("black", "-"), "grpo": ("tab:red", "--"), "maxrl": ("black", "-.")}
    color, dash = styles[objective]
    # MaxRL(T = M-1) coincides with low-tau SoftmaxGRPO, so it is drawn on top.
    return {"label": LABELS[objective], "color": color, "linestyle": dash, "linewidth": 1.4,
            "zorder": 5 if objective == "maxrl" else 2}


def render(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    started = time.time()
    curves = read_csv_frame(args.curves)
    weights = read_csv_frame(args.weights)
    view = read_csv_frame(args.weight_view)
    group_size = args.group_size

    taus = sorted(float(t) for t in curves["tau"].dropna().unique())
    fig, ax = plt.subplots(figsize=(7, 4))
    for (objective, tau), frame in curves.groupby(["method", "tau"], dropna=False, sort=False):
        style = _style(objective, tau, taus)
        ax.plot(frame["p"], frame["mean_abs_advantage"], **style)
        ax.fill_between(frame["p"], frame["mean_abs_advantage"] - 2 * frame["mean_abs_advantage_se"],
                        frame["mean_abs_advantage"] + 2 * frame["mean_abs_advantage_se"],
                        color=style["color"], alpha=0.2, linewidth=0)
    ax.set(xlabel="pass rate p", ylabel="mean |A| (Monte Carlo, ±2 SE)", yscale="log",
           title=f"(a) Mean absolute advantage, M = {group_size} binary rollouts")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    save_figure(fig, args.fig1a_png, args.fig1a_pdf, dpi=160)

    fig, ax = plt.subplots(figsize=(7, 4))
    for (objective, tau), frame in weights.groupby(["method", "tau"], dropna=False, sort=False):
        at_half = float(np.interp(0.5, frame["p"], frame["omega"]))
        finite = np.isfinite(frame["omega"])
        ax.plot(frame["p"][finite], frame["omega"][finite] / at_half, **_style(objective, tau, taus))
    ax.set(xlabel="pass rate p", ylabel="w(p) / w(0.5)", yscale="log", ylim=(0.3, 30),
           title=f"(b) Population prompt weights, M = {group_size}")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    save_figure(fig, args.fig1b_png, args.fig1b_pdf, dpi=160)

    value_columns = [c for c in view.columns if c.startswith("omega(")]

    def fmt(value: float) -> str:
        return "inf" if math.isinf(value) else f"{value:.3g}"

    rows = []
    for _, row in view.iterrows():
        objective = row["method"]
        name = LABELS[objective] + (f" (tau={row['tau']:g})" if objective == "softmax" else "")
        name += f" (T={group_size - 1})" if objective == "maxrl" else ""
        rows.append({"Objective": name, "Weight w(p)": FORMULAS_TEXT[objective],
                     **{c: fmt(float(row[c])) for c in value_columns}, "Geometry": GEOMETRY[objective]})
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
    parser = entry_parser(__doc__, "pipeline_lib.paper.theory")
    parser.add_argument("--group-size", type=int, required=True)
    for name in ("curves", "weights", "weight-view", "fig1a-png", "fig1a-pdf", "fig1b-png", "fig1b-pdf",
                 "table-stem"):
        parser.add_argument(f"--{name}", required=True)
    return render(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
