"""Do the default report's verdicts hold again on fresh seeds? The same code, config and rules, other training seeds.

Run: python benchmarks/replicate_verdicts.py --run --seeds 3 4 5 --out /tmp/fresh
         # clones HEAD into /tmp/fresh/repo and runs the README's main job there with train.seeds = [3, 4, 5]
         # (about 10 min on 2 cores), then compares its report with results/paper/reproduction_report.md
     python benchmarks/replicate_verdicts.py --fresh /tmp/fresh/repo/results/paper/reproduction_report.md
         # compares two finished reports only

Reads the claims table ("## Claims") of both reports, matches the rows by claim and task and prints both verdicts
side by side. A claim the default report calls *supported* or *contradicted* replicates when the fresh report gives
it the same verdict under the same rules (Holm over its own table); the exit status is 1 when one does not, 0
otherwise (inconclusive rows are printed, not judged: they claim nothing). The fresh run only changes
``train.seeds``; baselines, the ablation and judged runs keep their configured seeds, so only the main study's
claims (the rows with 3 or more seeds) are on fresh seeds.

The fresh run evaluates on the test split: each such run is a read of the test split, recorded in docs/measurements.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
POSITIVE = ("supported", "contradicted")


def claims(report: Path) -> dict[tuple[str, str], dict[str, str]]:
    """The claims table of a reproduction report, keyed by (claim, task)."""
    if not report.is_file():
        raise SystemExit(f"{report}: no reproduction report there (run the main job first)")
    lines = report.read_text().splitlines()
    try:
        start = lines.index("## Claims")
    except ValueError:
        raise SystemExit(f"{report}: no '## Claims' section") from None
    rows, header = {}, None
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if not line.startswith("| "):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if header is None:
            header = cells
            continue
        if set(line) <= set("|- "):
            continue
        if len(cells) != len(header):
            raise SystemExit(f"{report}: claims row has {len(cells)} cells, header {len(header)}: {line}")
        row = dict(zip(header, cells, strict=True))
        rows[(row["Claim"], row["Task"])] = row
    if not rows:
        raise SystemExit(f"{report}: the claims table has no rows")
    return rows


def verdict_word(row: dict[str, str]) -> str:
    return row["Verdict"].split(" (")[0]


def describe(row: dict[str, str]) -> str:
    return f"{row['Evidence']}, seeds {row['Seeds']}, Holm p {row['Holm-adjusted p']}, {row['Verdict']}"


def compare(default: Path, fresh: Path) -> int:
    """Print both verdicts of every claim; 1 if a positive verdict of ``default`` does not hold in ``fresh``."""
    before, after = claims(default), claims(fresh)
    failed = 0
    for key, row in before.items():
        again = after.get(key)
        positive = verdict_word(row) in POSITIVE
        holds = again is not None and verdict_word(again) == verdict_word(row)
        mark = ("replicates" if holds else "DOES NOT REPLICATE") if positive else "no verdict to replicate"
        failed += positive and not holds
        print(f"{key[0]} [{key[1]}]\n  default: {describe(row)}\n  fresh:   "
              f"{describe(again) if again else '(no such row)'}\n  -> {mark}")
    positives = sum(verdict_word(row) in POSITIVE for row in before.values())
    if positives:
        print(f"\n{positives - failed} of {positives} positive verdicts of {default} hold again in {fresh}")
    else:
        print(f"\n{default} gives no supported or contradicted verdict (too few seeds for report.min_seeds, or "
              "every interval includes 0): nothing to replicate; compare the estimates above")
    return 1 if failed else 0


def run_fresh(seeds: list[int], out: Path) -> Path:
    """Clone HEAD into ``out/repo`` and run the main job there with ``train.seeds = seeds``; its report's path."""
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.strip()
    if dirty:
        raise SystemExit(f"uncommitted changes in {REPO}: the fresh run clones HEAD, so commit first\n{dirty}")
    clone = out / "repo"
    if clone.exists():
        raise SystemExit(f"{clone} exists: give a new --out")
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    if (REPO.parent / "shared").exists() and not (out / "shared").exists():
        (out / "shared").symlink_to(REPO.parent / "shared")
    overlay = out / "fresh_seeds.yaml"
    overlay.write_text(f"# benchmarks/replicate_verdicts.py: the tiny default on other training seeds\n"
                       f"train: {{seeds: {list(seeds)}}}\n")
    subprocess.run(["snakemake", "--configfile", "config/config.yaml", str(overlay)], cwd=clone, check=True)
    return clone / "results/paper/reproduction_report.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--default", type=Path, default=REPO / "results/paper/reproduction_report.md",
                        help="the report whose verdicts are checked (default: this checkout's)")
    parser.add_argument("--fresh", type=Path, default=None, help="a finished fresh-seed report (no run)")
    parser.add_argument("--run", action="store_true", help="run the fresh-seed main job first")
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 4, 5])
    parser.add_argument("--out", type=Path, default=None, help="with --run: a new directory for the clone")
    args = parser.parse_args(argv)
    if args.run == (args.fresh is not None):
        parser.error("give either --run (with --out) or --fresh")
    if args.run and args.out is None:
        parser.error("--run needs --out")
    fresh = run_fresh(args.seeds, args.out.resolve()) if args.run else args.fresh
    return compare(args.default, fresh)


if __name__ == "__main__":
    sys.exit(main())
