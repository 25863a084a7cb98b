"""Audit an output: walk its provenance chain back to the raw data and check every link.

    python -m pipeline_lib audit results/paper/tables/table1.tex

For each file in the chain: its sidecar exists, its sha256 matches the sidecar, each input
exists and still has the hash the consuming step recorded; every training step's DONE
sentinel reached its final step; every step ran from a clean tree, and all steps ran from
the same code version (or the difference is listed). Prints the chain as a tree and exits
non-zero naming every problem. Unlike Snakemake's rerun triggers, this sees edits inside
library code, because each sidecar records the git commit and the hash of the diff.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline_lib.io import sha256_file, write_text
from pipeline_lib.provenance import SIDECAR_SUFFIX

__all__ = ["AuditReport", "audit"]


@dataclass
class AuditReport:
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    code_versions: dict[tuple[Any, ...], list[str]] = field(default_factory=dict)
    files: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


def _check_done(record: dict[str, Any], report: AuditReport) -> None:
    for output in record.get("outputs", []):
        if Path(output["path"]).name == "DONE.json" and Path(output["path"]).is_file():
            done = json.loads(Path(output["path"]).read_text())
            if done.get("final_step") != done.get("total_steps"):
                report.problems.append(f"{output['path']}: run stopped at step {done.get('final_step')} of "
                                       f"{done.get('total_steps')}")


def _visit(path: Path, expected_sha: str | None, depth: int, report: AuditReport, seen: set[Path]) -> None:
    indent = "  " * depth
    if not path.is_file():
        report.problems.append(f"{path}: missing")
        report.lines.append(f"{indent}{path}  MISSING")
        return
    actual = sha256_file(path)
    report.files += 1
    status = "ok"
    if expected_sha is not None and actual != expected_sha:
        report.problems.append(f"{path}: content changed since it was used (sha256 {actual[:12]} != recorded "
                               f"{expected_sha[:12]})")
        status = "CHANGED"
    sidecar = _sidecar(path)
    if not sidecar.is_file():
        if depth == 0 or path.suffix not in {".parquet", ".jsonl", ".json", ".csv"}:
            report.problems.append(f"{path}: no provenance sidecar {sidecar.name}")
            report.lines.append(f"{indent}{path}  [{status}] NO SIDECAR")
        else:  # raw input (a fixture or downloaded file): a leaf of the chain
            report.lines.append(f"{indent}{path}  [{status}] raw input, sha256 {actual[:12]}")
        return
    record = json.loads(sidecar.read_text())
    own = next((o for o in record.get("outputs", []) if Path(o["path"]) == path), None)
    if own is None:
        report.problems.append(f"{sidecar}: does not list {path} among its outputs")
    elif own["sha256"] != actual:
        report.problems.append(f"{path}: sha256 {actual[:12]} differs from its sidecar's {own['sha256'][:12]} "
                               "(modified after it was written)")
        status = "MODIFIED"
    code = record.get("code", {})
    key = (code.get("git_commit"), code.get("diff_sha256"))
    report.code_versions.setdefault(key, []).append(str(path))
    if code.get("dirty"):
        status += ", dirty tree"
    report.lines.append(f"{indent}{path}  [{status}] step {record.get('step')} @ {str(code.get('git_commit'))[:10]}")
    _check_done(record, report)
    if path in seen:
        return
    seen.add(path)
    for entry in record.get("inputs", []):
        _visit(Path(entry["path"]), entry["sha256"], depth + 1, report, seen)


def audit(target: str | Path) -> AuditReport:
    report = AuditReport()
    _visit(Path(target), None, 0, report, set())
    if len(report.code_versions) > 1:
        versions = "; ".join(f"{commit and commit[:10]}+diff {diff and diff[:10]}: {len(paths)} file(s)"
                             for (commit, diff), paths in report.code_versions.items())
        report.problems.append(f"the chain was produced by {len(report.code_versions)} code versions: {versions}")
    for (commit, diff), paths in report.code_versions.items():
        if diff is not None:
            report.problems.append(f"{len(paths)} file(s) were made from a dirty tree (commit {str(commit)[:10]}, "
                                   f"uncommitted diff {diff[:10]}), e.g. {paths[0]}")
    return report


def render(report: AuditReport) -> str:
    lines = [*report.lines, "", f"{report.files} file(s) checked, {len(report.code_versions)} code version(s)"]
    if report.problems:
        lines += ["", f"AUDIT FAILED: {len(report.problems)} problem(s)", *[f"  - {p}" for p in report.problems]]
    else:
        lines.append("audit passed: every file exists, every hash matches, every run finished, one clean code version")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline_lib audit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", help="the file whose chain to audit")
    parser.add_argument("--out", default=None, help="also write the audit to this file")
    parser.add_argument("--no-fail", action="store_true", help="exit 0 even when problems are found (for reports)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    report = audit(args.output)
    text = render(report)
    print(text, end="")
    if args.out:
        write_text(args.out, text)
    return 0 if report.ok or args.no_fail else 1
