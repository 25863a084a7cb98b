"""Reading YAML files strictly: every YAML file the project reads (configs, the schema, profiles, reference data) goes
through :func:`load_yaml`. A duplicate key is an error naming both lines (YAML itself keeps the last one silently), and
a missing, binary or malformed file is one sentence naming it, not a traceback. Only safe loaders: no objects.
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path
from typing import Any

import yaml

__all__ = ["YAMLFileError", "config_file_problem", "load_yaml", "refuse_unsafe_config_arguments"]


class YAMLFileError(ValueError):
    """A YAML file is missing, not UTF-8 text, malformed or has a duplicate key; the message names it."""


class _DuplicateKeyError(yaml.MarkedYAMLError):
    pass


class _StrictMappings:
    """A safe loader's mapping constructor that refuses a mapping with the same key twice (a ``<<:`` merge may still
    be overridden, as YAML intends: only the keys written in the mapping itself count)."""

    def construct_mapping(self: Any, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                earlier = first_line.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if earlier is not None:
                raise _DuplicateKeyError(
                    "while reading a mapping", node.start_mark,
                    f"duplicate key {key!r} (first given on line {earlier}); YAML would silently keep only the last",
                    key_node.start_mark)
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


class _StrictLoader(_StrictMappings, yaml.SafeLoader):
    """``yaml.SafeLoader`` refusing duplicate keys: its errors are the ones :func:`load_yaml` reports."""


#: The same loader on libyaml's parser (same constructor, same result; the schema's parse at every Snakemake start
#: cost about 0.4 CPU s in pure Python, 0.06 here). Only the successful parse is taken from it: a file it refuses is
#: read again by :class:`_StrictLoader`, so every error message is PyYAML's own, as before.
_FastStrictLoader: type | None = (type("_FastStrictLoader", (_StrictMappings, yaml.CSafeLoader), {})
                                  if getattr(yaml, "__with_libyaml__", False) else None)

for _loader in (_StrictLoader, _FastStrictLoader):
    if _loader is not None:
        _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _loader.construct_mapping)


#: The most values a YAML file may expand to through its aliases (a profile's shared resource blocks are a few hundred):
#: nine nested aliases of ten ("billion laughs") expand to 10**9, which costs tens of CPU-minutes to walk.
ALIAS_BUDGET = 100_000


def _events_problem(text: str) -> str | None:
    """What makes YAML ``text`` unsafe to hand to Snakemake or a validator, from its parse events alone (linear in
    the text, nothing expanded, nothing constructed): ``line N: ...``, or None. A top-level ``__use_yte__`` key
    (Snakemake runs such a file's expressions as Python); more than :data:`ALIAS_BUDGET` values once aliases are
    expanded."""
    loader = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader
    sizes: dict[str, int] = {}  # anchor -> the values its node expands to
    stack: list[list[Any]] = []  # open collections: [values so far, anchor, is_mapping, keys seen]
    total = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            line = event.start_mark.line + 1
            if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
                size = sizes.get(event.anchor, 0) if isinstance(event, yaml.AliasEvent) else 1
                if isinstance(event, yaml.AliasEvent) and event.anchor not in sizes:
                    return f"line {line}: alias *{event.anchor} of an anchor not defined before it"
                if isinstance(event, yaml.ScalarEvent):
                    if event.anchor:
                        sizes[event.anchor] = 1
                    if len(stack) == 1 and stack[0][2] and stack[0][3] % 2 == 0 and event.value == "__use_yte__":
                        return (f"line {line}: `__use_yte__`: a YTE template, whose expressions Snakemake would "
                                "run as Python while loading it; write the values out")
                total += size
                if stack:
                    stack[-1][0] += size
                    stack[-1][3] += 1
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                stack.append([1, event.anchor, isinstance(event, yaml.MappingStartEvent), 0])
                total += 1
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                size, anchor, _, _ = stack.pop()
                if anchor:
                    sizes[anchor] = size
                if stack:
                    stack[-1][0] += size
                    stack[-1][3] += 1
            if total > ALIAS_BUDGET:
                return (f"line {line}: its aliases expand to more than {ALIAS_BUDGET:,} values (a \"billion laughs\" "
                        "file); write the values out")
    except yaml.YAMLError:
        return None  # malformed: the loader reports it, with its line
    return None


def config_file_problem(path: str | os.PathLike[str], aliases: bool = False) -> str | None:
    """Why a config file must be refused before anything evaluates it, as ``<path>, line N: ...``, or None: not
    UTF-8 text, a YTE template (``__use_yte__``), YAML anchors or aliases (``aliases=False``: a config has no use for
    them, and nested ones expand to billions of values), or aliases past :data:`ALIAS_BUDGET`."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError:
        return None  # missing or unreadable: the loader says so
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        return (f"{path}, line {line}: not UTF-8 text (byte {exc.start} is {data[exc.start:exc.start + 1]!r}); "
                "save it as UTF-8")
    if not aliases:
        loader = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader
        try:
            for event in yaml.parse(text, Loader=loader):
                if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                    mark = "*" if isinstance(event, yaml.AliasEvent) else "&"
                    return (f"{path}, line {event.start_mark.line + 1}: YAML anchor or alias {mark}{event.anchor}; "
                            "config files may not use them (nested aliases expand to billions of values: \"billion "
                            "laughs\"); write the values out")
        except yaml.YAMLError:
            pass  # malformed: the loader reports it
    problem = _events_problem(text)
    return f"{path}, {problem}" if problem else None


def _configfile_arguments(argv: list[str]) -> list[str]:
    """The files given to ``--configfile``/``--configfiles`` on a Snakemake command line."""
    files, taking = [], False
    for arg in argv:
        if arg.startswith("--configfile=") or arg.startswith("--configfiles="):
            files.append(arg.split("=", 1)[1])
            taking = False
        elif arg in ("--configfile", "--configfiles"):
            taking = True
        elif arg.startswith("-"):
            taking = False
        elif taking:
            files.append(arg)
    return files


def refuse_unsafe_config_arguments(argv: list[str] | None = None) -> None:
    """Refuse the command line's config files before Snakemake loads them: called from the workflow profile
    (``profiles/default/config.yaml``), which Snakemake reads before it parses ``--configfile`` (and there it would
    run a YTE template's expressions and hand on a billion-laughs file). Raises :class:`YAMLFileError` naming the
    file and line; Snakemake reports it as the profile's one-line error."""
    import sys

    for path in _configfile_arguments(list(sys.argv[1:] if argv is None else argv)):
        problem = config_file_problem(path)
        if problem:
            raise YAMLFileError(f"refused before Snakemake loads it: config file {problem}")


def load_yaml(path: str | os.PathLike[str], what: str = "YAML file",
              error: type[ValueError] = YAMLFileError, aliases: bool = True) -> Any:
    """The content of a YAML file, or an ``error`` that names it: missing, a directory, not UTF-8 text, invalid YAML
    or a duplicate key (with its line), a YTE template, aliases past :data:`ALIAS_BUDGET` values, or (``aliases``
    False, as for config files) any anchor or alias; checked on the parse events, before anything is built."""
    path = Path(path)
    if not path.exists():
        raise error(f"{what} {path} does not exist")
    if path.is_dir():
        raise error(f"{what} {path} is a directory, not a file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise error(f"{what} {path}, line {line}: not UTF-8 text (byte {exc.start} is "
                    f"{data[exc.start:exc.start + 1]!r}); is it a binary file, or saved in another encoding?") from None
    if "\x00" in text:
        raise error(f"{what} {path} holds NUL bytes: a binary file, not YAML")
    problem = config_file_problem(path, aliases=aliases)
    if problem:
        raise error(f"{what} {problem}")
    if _FastStrictLoader is not None:
        with suppress(yaml.YAMLError):  # refused: parsed again below for PyYAML's own message
            return yaml.load(text, Loader=_FastStrictLoader)  # a CSafeLoader subclass: no arbitrary objects
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"{what} {path}{where}: {problem}") from None
