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

__all__ = ["YAMLFileError", "load_yaml"]


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


def load_yaml(path: str | os.PathLike[str], what: str = "YAML file",
              error: type[ValueError] = YAMLFileError) -> Any:
    """The content of a YAML file, or an ``error`` that names it: missing, a directory, not UTF-8 text, invalid YAML
    or a duplicate key (with its line)."""
    path = Path(path)
    if not path.exists():
        raise error(f"{what} {path} does not exist")
    if path.is_dir():
        raise error(f"{what} {path} is a directory, not a file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text (byte {exc.start} is {data[exc.start:exc.start + 1]!r}); "
                    "is it a binary file?") from None
    if "\x00" in text:
        raise error(f"{what} {path} holds NUL bytes: a binary file, not YAML")
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
