"""The command-line contract (``--spec --run-dir --seed --threads --tracking``) is declared once, in
pipeline_lib.core.cli:
an entry point takes it through ``add_run_arguments`` / ``add_spec_argument`` / ``add_seed_argument`` /
``add_threads_argument`` / ``add_tracking_argument``, never through an ``add_argument`` of its own."""

from __future__ import annotations

import argparse
import ast
import logging

import pytest

from pipeline_lib.core.cli import (
    LOG_FORMAT,
    add_run_arguments,
    add_seed_argument,
    add_spec_argument,
    add_threads_argument,
    entry_parser,
)
from tests.conftest import REPO

#: A module docstring: a first paragraph of two lines, then a paragraph whose layout the full description keeps.
DOC = "First line of the\nmodule, second line.\n\nMore text,\n  kept as written.\n"

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


def test_every_entry_point_starts_with_the_one_prologue() -> None:
    """An entry point's parser and log set-up come from ``entry_parser`` / ``setup_logging``: no module but
    pipeline_lib/core/cli.py builds an ``argparse.ArgumentParser`` or calls ``logging.basicConfig`` itself."""
    own = []
    for path in sorted((REPO / "pipeline_lib").rglob("*.py")):
        relative = str(path.relative_to(REPO))
        if relative == "pipeline_lib/core/cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=relative)):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("argparse.ArgumentParser",
                                                                         "logging.basicConfig"):
                own.append(f"{relative}:{node.lineno}: {ast.unparse(node.func)}")
    assert not own, "use pipeline_lib.core.cli.entry_parser:\n" + "\n".join(own)


@pytest.mark.parametrize(("summary", "shown"), [("all", DOC), ("line", "First line of the\n"),
                                                ("paragraph", "First line of the module, second line.\n")])
def test_the_prologue_shows_the_docstring_as_asked(summary, shown) -> None:
    parser = entry_parser(DOC, "pipeline_lib.example", summary=summary, logs=False)
    text = parser.format_help()
    assert text.startswith("usage: python -m pipeline_lib.example [-h]\n\n" + shown + "\n")
    assert ("More text,\n  kept as written." in text) == (summary == "all")


def test_the_prologue_sets_up_the_one_log_format() -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    root.handlers.clear()
    try:
        entry_parser(DOC)
        assert root.level == logging.INFO
        assert [h.formatter._fmt for h in root.handlers] == [LOG_FORMAT]
        root.handlers.clear()
        entry_parser(DOC, logs=False)
        assert root.handlers == []
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
