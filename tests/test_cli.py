"""The command-line contract (``--spec --run-dir --seed --threads --tracking``) is declared once, in
pipeline_lib.core.cli:
an entry point takes it through ``add_run_arguments`` / ``add_spec_argument`` / ``add_seed_argument`` /
``add_threads_argument`` / ``add_tracking_argument``, never through an ``add_argument`` of its own."""

from __future__ import annotations

import argparse
import ast

import pytest

from pipeline_lib.core.cli import add_run_arguments, add_seed_argument, add_spec_argument, add_threads_argument
from tests.conftest import REPO

CONTRACT = ("--spec", "--run-dir", "--seed", "--threads", "--tracking")

#: Entry points that still declare a contract flag in their own argparse, each with why; an entry leaves the list
#: when its entry point moves onto pipeline_lib.core.cli (the list stays the whole story: a stale entry fails too).
LEFT: dict[str, str] = {
    "pipeline_lib/jobs/judge/calibration.py": "the judge entry points' argparse is issue 36's console change",
    "pipeline_lib/core/theory/compute.py": "the theory entry point's argparse is issue 36's console change",
}


def _own_declarations() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted((REPO / "pipeline_lib").rglob("*.py")):
        relative = str(path.relative_to(REPO))
        if path.name == "cli.py" and path.parent.name in ("pipeline_lib", "core"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=relative)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument" and node.args
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value in CONTRACT):
                found.setdefault(relative, []).append(f"{relative}:{node.lineno}: {node.args[0].value}")
    return found


def test_no_entry_point_declares_the_contract_itself() -> None:
    found = _own_declarations()
    unlisted = [line for path, lines in found.items() if path not in LEFT for line in lines]
    assert not unlisted, "declare these through pipeline_lib.core.cli:\n" + "\n".join(unlisted)
    stale = set(LEFT) - set(found)
    assert not stale, f"LEFT entries that now go through pipeline_lib.core.cli: {stale}"


@pytest.mark.parametrize(("argv", "seed", "threads"), [(["--seed", "3", "--threads", "2"], 3, 2), ([], 0, 1)])
def test_an_evaluation_takes_the_same_flags_as_a_training_run(argv, seed, threads) -> None:
    """The optional seed (evaluation) and the threads parse as the training entry points' do."""
    evaluation = argparse.ArgumentParser()
    add_spec_argument(evaluation, "config `eval`")
    add_seed_argument(evaluation, required=False)
    add_threads_argument(evaluation)
    args = evaluation.parse_args(["--spec", "{}", *argv])
    assert (args.spec, args.seed, args.threads) == ("{}", seed, threads)
    training = argparse.ArgumentParser()
    add_run_arguments(training, run_dir=False, tracking=False)
    with pytest.raises(SystemExit):  # a training run's seed is required
        training.parse_args(["--spec", "{}"])
    assert training.parse_args(["--spec", "{}", "--seed", str(seed), *argv[2:]]).seed == seed
