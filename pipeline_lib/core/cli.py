"""The command-line contract of the pipeline's entry points, defined once: ``--spec`` (a JSON file, or inline JSON),
``--run-dir``, ``--seed``, ``--threads`` and ``--tracking``, for both sides of it (the entry points' argparse and the
plan's command builders).

Specs travel in files, not on the command line: a command builder passes inline JSON through :func:`file_args`,
which writes each JSON value to a content-addressed file under :data:`SPEC_DIR` (its name is the digest of its text,
so the same spec is the same path, written once, and a changed spec is a new path) and puts the path on the command
line. An entry point reads either (:func:`json_text`), so a person can still paste a spec inline.

Every entry point's ``main`` starts the same way, with :func:`entry_parser`: the one log set-up
(:func:`setup_logging`, :data:`LOG_FORMAT`) and the parser with its usage line and description.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pipeline_lib.core.io import write_text
from pipeline_lib.core.tracking import TrackingSettings, tracking_from_json

__all__ = ["JSON_FLAGS", "LOG_FORMAT", "SPEC_DIR", "add_run_arguments", "add_seed_argument", "add_spec_argument",
           "add_threads_argument", "add_tracking_argument", "entry_parser", "file_args", "json_file", "json_text",
           "json_value", "run_args", "setup_logging", "with_files"]

#: Where the specs of the commands live, relative to the working directory of the run (the repository root).
SPEC_DIR = Path(".snakemake") / "specs"

#: The flags whose value is JSON (a spec, settings, a judge, a config): :func:`file_args` moves them to files.
JSON_FLAGS = ("--spec", "--tracking", "--steps", "--config", "--eval-spec", "--judge", "--reward-weights")


#: The entry points' log line (time, level, logger, message); their rule's log file captures it from stderr.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging() -> None:
    """INFO and above to stderr in :data:`LOG_FORMAT`: the one log set-up of the entry points."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)


def entry_parser(doc: str | None, command: str | None = None, *,
                 summary: Literal["all", "line", "paragraph"] = "all", logs: bool = True) -> argparse.ArgumentParser:
    """The prologue of an entry point's ``main``: set up logging (unless ``logs`` is false: the entry points that
    print their own report) and return its argument parser.

    ``doc`` is the module's docstring: ``summary="all"`` shows it whole, as written; ``"line"`` its first line and
    ``"paragraph"`` its first paragraph, wrapped by argparse. ``command`` is what follows ``python -m`` in the usage
    line (``"pipeline_lib.paper.curves"``); none: argparse's default, the script's file name.
    """
    if logs:
        setup_logging()
    prog = None if command is None else f"python -m {command}"
    if summary == "all":
        return argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    text = doc or ""
    first = text.splitlines()[0] if summary == "line" else text.split("\n\n")[0]
    return argparse.ArgumentParser(prog=prog, description=first)


def json_text(value: str) -> str:
    """An argparse ``type``: the JSON text of ``value``, which is inline JSON or the path of a JSON file."""
    if value.lstrip()[:1] in ("{", "[", '"') or value.strip() in ("null", "true", "false"):
        return value
    path = Path(value)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise argparse.ArgumentTypeError(f"{value}: neither inline JSON nor a readable JSON file ({error})") from None


def json_value(value: str) -> Any:
    """An argparse ``type``: the parsed JSON of ``value`` (inline JSON or a JSON file's path; :func:`json_text`)."""
    text = json_text(value)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"{value}: not JSON ({error})") from None


def json_file(text: str, directory: Path = SPEC_DIR) -> str:
    """Write ``text`` to ``<directory>/<sha256[:16]>.json`` (once; atomically) and return that path."""
    path = Path(directory) / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        write_text(path, text)
    return str(path)


def file_args(args: Sequence[str], flags: Iterable[str] = JSON_FLAGS, directory: Path = SPEC_DIR) -> list[str]:
    """``args`` with the inline-JSON value of every flag in ``flags`` replaced by the path of a file holding it."""
    flags, out = set(flags), list(args)
    for index in range(len(out) - 1):
        if out[index] in flags and out[index + 1].lstrip()[:1] in ("{", "["):
            out[index + 1] = json_file(out[index + 1], directory)
    return out


def with_files(params: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """A rule's ``params`` plus ``<key>_file`` for each JSON parameter in ``keys``: the path of a file holding it
    (:func:`json_file`), for the shell line, while the JSON parameter itself stays what Snakemake compares. A
    parameter given as a function keeps its signature (Snakemake reads it: a parameter derived from ``input`` or
    ``output`` is not compared for reruns, and its file is not either)."""

    def in_file(value: Any) -> Callable[..., str]:
        if not callable(value):
            return lambda wildcards: json_file(value)
        return functools.wraps(value)(lambda *args, **kwargs: json_file(value(*args, **kwargs)))

    return {**params, **{f"{key}_file": in_file(params[key]) for key in keys}}


def run_args(spec: str, run_dir: str, seed: int) -> list[str]:
    """The contract's arguments of one run as the plan's command builders write them (:func:`add_run_arguments`
    reads them back): its spec (a file's path or JSON), run directory and seed."""
    return ["--spec", spec, "--run-dir", run_dir, "--seed", str(seed)]


def add_spec_argument(parser: argparse.ArgumentParser, help: str = "the run spec (pipeline_lib.core.run_spec.RunSpec)",
                      required: bool = True) -> None:
    """``--spec``: a JSON file's path or inline JSON; the entry point gets the JSON text."""
    parser.add_argument("--spec", required=required, type=json_text, help=f"{help}: a JSON file or inline JSON")


def _tracking(value: str) -> TrackingSettings | None:
    return tracking_from_json(json_text(value))


def add_tracking_argument(parser: argparse.ArgumentParser) -> None:
    """``--tracking``: the run's live-tracking settings (config ``tracking`` + the run id) as a JSON file or inline
    JSON; none: metrics.jsonl only."""
    parser.add_argument("--tracking", type=_tracking, default=None,
                        help="the run's tracking settings (JSON file or inline JSON); none: metrics.jsonl only")


def add_run_arguments(parser: argparse.ArgumentParser,
                      spec_help: str = "the run spec (pipeline_lib.core.run_spec.RunSpec)",
                      *, run_dir: bool = True, threads: bool = True, tracking: bool = True) -> None:
    """The training entry points' contract: ``--spec``, ``--seed``, and where they take them ``--run-dir``,
    ``--threads`` (the rule's threads) and ``--tracking`` (live tracking settings; pipeline_lib.core.tracking)."""
    add_spec_argument(parser, spec_help)
    add_seed_argument(parser)
    if run_dir:
        parser.add_argument("--run-dir", type=Path, required=True)
    if threads:
        add_threads_argument(parser)
    if tracking:
        add_tracking_argument(parser)


def add_seed_argument(parser: argparse.ArgumentParser, required: bool = True, default: int = 0) -> None:
    """``--seed``: the seed the entry point seeds itself from (required, or ``default`` where an evaluation's
    sampling has one)."""
    if required:
        parser.add_argument("--seed", type=int, required=True)
    else:
        parser.add_argument("--seed", type=int, default=default)


def add_threads_argument(parser: argparse.ArgumentParser) -> None:
    """``--threads``: the rule's threads (torch's intra-op threads)."""
    parser.add_argument("--threads", type=int, default=1)
