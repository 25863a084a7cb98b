"""Imports point one way: core -> plan -> jobs -> paper (the one statement of the package's layers).

Each layer is a folder of the package (``core``, ``plan``, ``jobs``, ``paper``): ``LAYERS`` maps folders.

A module of ``pipeline_lib`` may import modules of its own layer or a lower one, never a higher one:

* **core**: what every stage stands on: environment, I/O, config, tracking, provenance, statistics,
  checkpoints, the advantage estimators and the loss, the theory, rewards, the LLM client, data, rubrics, and the
  model code (``pipeline_lib.core.model``) that both evaluation and the engines build and sample with, and the test of
  which Snakemake profile is in force (``profiles``, read by ``profiles/default``);
* **plan**: what runs, with which settings (``pipeline_lib.plan``, ``targets``); the workflow imports it
  while it parses, so it stays free of torch, vLLM and verl;
* **jobs**: what a job runs: the engines, the method logic they share (``methods``), evaluation, judging, the ImageNet
  study's training (``classify``), the audit and the environment locks' tool (``envlock``);
* **paper**: the tables, figures and report written from the jobs' outputs, and the package's command line
  (``__main__``), which reaches every layer's commands (``fidelity`` is the paper's).

Within the jobs layer the engines (``jobs.engines.local``, ``verl``, ``trl``) import no other engine: what two engines
share is method logic of no engine (``jobs.methods``), which imports no engine; and no training job's code reaches the
plan (a job reads what the plan decided from its spec and command), so its code digest covers its own code only.

Within and across layers no two packages import each other (no cycle between packages, even through function-local
imports), and an import of ``pipeline_lib`` sits at the top of its module: a function-local one hides a cycle or a
heavy dependency, so each that stays is in ``LAZY_IMPORTS`` with the heavy library it keeps off a light path.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "pipeline_lib"

#: The layers, lowest first, each with the folders (and root modules) it holds: the package's folders are this
#: table (names relative to ``pipeline_lib``; "" is the package itself). A module belongs to the longest entry that
#: names it or a package above it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("", "core")),
    ("plan", ("plan",)),
    ("jobs", ("jobs",)),
    ("paper", ("paper", "__main__")),
)

#: Layer folders that hold single modules (the old package root's): each module there is its own unit of the cycle
#: check, as it was at the root; a sub-package (``core.data``, ``jobs.engines.local``) is one unit.
MODULE_FOLDERS = ("pipeline_lib.core", "pipeline_lib.jobs")

#: Function-local imports of ``pipeline_lib`` that stay, (importer, imported) -> why: each keeps a heavy third-party
#: library out of a process that must not pay for it (never a cycle: the cycle test sees these imports too).
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    ("pipeline_lib.paper.steps", "pipeline_lib.core.data.real"):
        "real imports pandas (about 0.5 CPU s), which only a plan with dataset builds needs; common.smk imports steps "
        "while the workflow parses",
    ("pipeline_lib.core.data.build", "pipeline_lib.core.data.imagenet"):
        "imagenet imports torch (about 1 CPU s), which only the ImageNet build needs, not each tiny task's data job",
    ("pipeline_lib.jobs.engines.verl.preflight", "pipeline_lib.core.model"):
        "the model code imports torch; preflight.smk imports this module while the workflow parses",
    ("pipeline_lib.jobs.engines.verl.preflight", "pipeline_lib.jobs.engines.verl.train"):
        "train imports torch (through the advantages); preflight.smk imports this module while the workflow parses",
    ("pipeline_lib.jobs.engines.verl.preflight", "pipeline_lib.jobs.engines.verl.sft"):
        "sft imports torch (through the checkpoints); preflight.smk imports this module while the workflow parses",
    ("pipeline_lib.jobs.engines.verl.train", "pipeline_lib.jobs.engines.verl.raro_loop"):
        "raro_loop imports verl's agent loop (Ray; seconds), which only a RaRO run's check needs",
    ("pipeline_lib.jobs.engines.verl.checks", "pipeline_lib.jobs.engines.verl.estimators"):
        "estimators imports verl's core_algos and torch; common.smk imports checks while the workflow parses",
    ("pipeline_lib.jobs.engines.verl.train", "pipeline_lib.jobs.engines.verl.estimators"):
        "estimators imports verl's core_algos and registers the estimators there (seconds, and a side effect the "
        "launcher does not need: verl's own processes import it through the entry point)",
}

#: Libraries the workflow's parse must not import (seconds each, and absent from some job environments).
HEAVY_LIBRARIES = ("torch", "transformers", "vllm", "verl", "ray", "trl")


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    path: Path
    line: int
    local: bool  # inside a function or class body, not at the module's top level

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    relative = module.removeprefix("pipeline_lib").removeprefix(".")
    best, best_length = -1, -1
    for index, (_, members) in enumerate(LAYERS):
        for member in members:
            matches = relative == member or (member and relative.startswith(member + "."))
            if matches and len(member) > best_length:
                best, best_length = index, len(member)
    return best


def package_of(module: str) -> str:
    """The unit of the cycle check: a module's package (``engines.local``), or a top-level module itself."""
    is_package = MODULES[module].name == "__init__.py"
    if is_package or module.count(".") == 1 or module.rsplit(".", 1)[0] in MODULE_FOLDERS:
        return module
    return module.rsplit(".", 1)[0]


def _imports_of(module: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Import] = []
    is_package = path.name == "__init__.py"

    def add(target: str, node: ast.stmt, local: bool) -> None:
        if target == "pipeline_lib" or target.startswith("pipeline_lib."):
            found.append(Import(module, target, path, node.lineno, local))

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name, child, local)
            elif isinstance(child, ast.ImportFrom):
                if child.level:  # relative: resolve against this module's package
                    base = module.split(".")[: len(module.split(".")) - child.level + (1 if is_package else 0)]
                    source = ".".join([*base, child.module] if child.module else base)
                else:
                    source = child.module or ""
                for alias in child.names:
                    submodule = f"{source}.{alias.name}"
                    add(submodule if submodule in MODULES else source, child, local)
            visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                                     ast.ClassDef)))

    visit(tree, False)
    return found


IMPORTS = [imp for module, path in MODULES.items() for imp in _imports_of(module, path)]


def _checked() -> list[Import]:
    return IMPORTS


def _report(lines: Iterable[str]) -> list[str]:
    """Distinct lines in file and line order (one import statement may name several things)."""
    def order(line: str) -> tuple[str, int]:
        path, number = line.split(":")[:2]
        return path, int(number)

    return sorted(set(lines), key=order)


def test_every_module_has_a_layer() -> None:
    unplaced = [module for module in MODULES if layer_of(module) < 0]
    assert not unplaced, f"modules in no layer (add them to LAYERS in {Path(__file__).name}): {unplaced}"


def test_no_module_imports_a_higher_layer() -> None:
    upward = _report(f"{imp.where()}: {imp.importer} ({LAYERS[layer_of(imp.importer)][0]}) imports {imp.imported} "
                     f"({LAYERS[layer_of(imp.imported)][0]}), a higher layer"
                     for imp in _checked() if layer_of(imp.imported) > layer_of(imp.importer))
    assert not upward, "imports against the layers (core -> plan -> jobs -> paper):\n" + "\n".join(upward)


def test_no_cycle_between_packages() -> None:
    edges: dict[str, dict[str, Import]] = {}
    for imp in _checked():
        source, target = package_of(imp.importer), package_of(imp.imported)
        if source != target:
            edges.setdefault(source, {}).setdefault(target, imp)
    cycles: dict[frozenset[str], str] = {}
    for start in sorted(edges):  # a shortest path back to each package, breadth first
        parents: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in parents:
            following = []
            for node in frontier:
                for target in sorted(edges.get(node, {})):
                    if target not in parents:
                        parents[target] = node
                        following.append(target)
            frontier = following
        if start in parents:
            path, node = [start], parents[start]
            while node != start:
                path.append(node)
                node = parents[node]
            path.reverse()
            hops = [edges[a][b] for a, b in zip([start, *path], path, strict=False)]
            cycles.setdefault(frozenset(path), " -> ".join([start, *path]) + "  (" + "; ".join(
                f"{h.where()} imports {h.imported}" for h in hops) + ")")
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles.values())


def test_pipeline_imports_sit_at_the_top_of_their_module() -> None:
    local = _report(f"{imp.where()}: {imp.importer} imports {imp.imported} inside a function"
                    for imp in _checked() if imp.local and (imp.importer, imp.imported) not in LAZY_IMPORTS)
    assert not local, ("function-local imports of pipeline_lib (move them to the top; a heavy dependency kept "
                       "lazy goes in LAZY_IMPORTS with its reason):\n" + "\n".join(local))


def test_every_listed_exception_still_occurs() -> None:
    """A lazy import that is gone leaves the list, so the list stays the whole story."""
    local = {(imp.importer, imp.imported) for imp in IMPORTS if imp.local}
    assert not set(LAZY_IMPORTS) - local, f"LAZY_IMPORTS entries with no such import: {set(LAZY_IMPORTS) - local}"


def test_workflow_parse_path_is_light() -> None:
    """The modules the rules import while the workflow parses load none of the heavy libraries."""
    parsed = sorted({line.split()[1] for rules in (REPO / "workflow").rglob("*.smk")
                     for line in rules.read_text().splitlines()
                     if line.lstrip().startswith(("from pipeline_lib", "import pipeline_lib"))})
    assert "pipeline_lib.plan" in parsed and "pipeline_lib.plan.targets" in parsed, parsed
    code = (f"import importlib, sys\nfor name in {parsed!r}: importlib.import_module(name)\n"
            f"print(sorted(name for name in {HEAVY_LIBRARIES!r} if name in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]", f"importing {parsed} loads {result.stdout.strip()}"


#: The engines: sub-packages of ``pipeline_lib.jobs.engines``; none imports another.
ENGINES_PACKAGE = "pipeline_lib.jobs.engines"
#: Method logic of no engine, which every engine may import and which imports no engine.
METHODS_PACKAGE = "pipeline_lib.jobs.methods"


def engine_of(module: str) -> str | None:
    """The engine (``local``, ``verl``, ``trl``) a module belongs to, or None."""
    if not module.startswith(ENGINES_PACKAGE + "."):
        return None
    return module.removeprefix(ENGINES_PACKAGE + ".").split(".")[0]


def test_no_engine_imports_another_and_method_logic_imports_no_engine() -> None:
    engines = {engine_of(m) for m in MODULES} - {None}
    assert {"local", "verl", "trl"} <= engines, engines  # the check below checks real engines
    crossing = _report(f"{imp.where()}: {imp.importer} imports {imp.imported} (engine {engine_of(imp.imported)})"
                       for imp in IMPORTS if engine_of(imp.imported) is not None
                       and engine_of(imp.imported) != engine_of(imp.importer)
                       and (engine_of(imp.importer) is not None or imp.importer.startswith(METHODS_PACKAGE)))
    assert not crossing, (f"an engine or the shared method logic imports an engine (move what both need to "
                          f"{METHODS_PACKAGE}):\n" + "\n".join(crossing))


def test_no_training_job_reaches_the_plan() -> None:
    """The entry point of every training run of the tiny and the paper plan: its code (the closure its code digest
    covers, lazy imports included) holds no module of ``pipeline_lib/plan``."""
    from pipeline_lib.core.config import load_config_file
    from pipeline_lib.core.provenance import code_modules
    from pipeline_lib.plan.runs import plan_runs, validate_planned_config

    entries: set[str] = set()
    for name in ("config/config.yaml", "config/paper.yaml"):
        config = validate_planned_config(load_config_file(REPO / name), REPO / "workflow/schemas/config.schema.yaml",
                                         REPO)
        entries |= {run.entry_module for run in plan_runs(config).runs}
    assert {"pipeline_lib.jobs.engines.verl.train", "pipeline_lib.jobs.engines.local.rl"} <= entries, entries
    reaching = {entry: sorted(f for f in code_modules(entry) if f.startswith("pipeline_lib/plan/"))
                for entry in sorted(entries)}
    reaching = {entry: files for entry, files in reaching.items() if files}
    assert not reaching, f"training entry points whose code reaches the plan: {reaching}"


def test_the_verl_sft_entry_point_holds_no_rl_code() -> None:
    """verl SFT runs have their own entry point, apart from the RL one: its code (the closure its code digest covers,
    module strings and lazy imports included) holds no advantage estimator, reward, verl estimator plug-in, reward hook
    or RL baseline, so an edit of those reruns no SFT job (issue 58)."""
    from pipeline_lib.core.provenance import _closure

    sft = {str(path.relative_to(REPO)) for path in _closure("pipeline_lib.jobs.engines.verl.sft")}
    assert "pipeline_lib/jobs/engines/verl/runner.py" in sft  # the shared steps are there, the RL ones are not
    rl_code = ("pipeline_lib/core/rl/advantages.py", "pipeline_lib/core/rl/group_metrics.py",
               "pipeline_lib/core/rewards/", "pipeline_lib/jobs/methods/", "pipeline_lib/jobs/engines/verl/train.py",
               "pipeline_lib/jobs/engines/verl/translate.py", "pipeline_lib/jobs/engines/verl/checks.py",
               "pipeline_lib/jobs/engines/verl/estimators.py", "pipeline_lib/jobs/engines/verl/step_metrics.py",
               "pipeline_lib/jobs/engines/verl/reward.py", "pipeline_lib/jobs/engines/verl/raro_loop.py",
               "pipeline_lib/jobs/engines/verl/probe_keep.py")
    reaching = sorted(path for path in sft if path.startswith(rl_code))
    assert not reaching, f"the verl SFT entry point's code holds RL code: {reaching}"
    rl = {str(path.relative_to(REPO)) for path in _closure("pipeline_lib.jobs.engines.verl.train")}
    assert "pipeline_lib/core/rl/advantages.py" in rl and sft - {"pipeline_lib/jobs/engines/verl/sft.py"} <= rl
