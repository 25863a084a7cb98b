"""Config validation against ``workflow/schemas/config.schema.yaml``, with errors that name the key.

Snakemake's own ``validate`` prints the whole schema after the message; this one
reports each problem as one line with the dotted key path, and fills defaults.

Stricter than JSON Schema's defaults, so a bad value fails ``snakemake -n`` rather than a job:
``number`` excludes NaN and the infinities (YAML ``.nan``, ``.inf``), ``integer`` excludes
floats (``group_size: 8.0``) and booleans, a non-finite float is rejected anywhere (free-form
sections included), every dataset ``local:`` path must exist, and every ``tracking.backends`` entry must have its
package installed (the message names the pip extra).
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, ValidationError, validators

from pipeline_lib.tracking import missing_backend_packages

__all__ = ["ConfigError", "load_schema", "validate_config"]


class ConfigError(ValueError):
    """The config does not match the schema; the message lists every offending key."""


def load_schema(path: str | os.PathLike[str]) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _with_defaults(validator_class: type) -> type:
    """Extend a validator so missing keys with a schema ``default`` are filled in."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator: Any, properties: dict[str, Any], instance: Any, schema: dict[str, Any]) -> Any:
        if isinstance(instance, MutableMapping):
            for key, sub in properties.items():
                if "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(validator_class, {"properties": set_defaults})


def _is_number(checker: Any, instance: Any) -> bool:
    return isinstance(instance, int | float) and not isinstance(instance, bool) and math.isfinite(instance)


def _is_integer(checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


_STRICT_TYPES = Draft202012Validator.TYPE_CHECKER.redefine_many({"number": _is_number, "integer": _is_integer})
_DefaultingValidator = _with_defaults(validators.extend(Draft202012Validator, type_checker=_STRICT_TYPES))


def _walk(node: Any, path: tuple[str, ...] = ()) -> Any:
    """Every (dotted path, value) pair of a nested config, lists included."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, (*path, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, (*path, str(index)))


def _value_problems(config: MutableMapping[str, Any], base_dir: Path, reported: set[str]) -> list[str]:
    """Non-finite floats the schema did not type, and ``local`` dataset paths that do not exist."""
    problems = []
    for path, value in _walk(config):
        where = ".".join(path)
        if isinstance(value, float) and not math.isfinite(value) and where not in reported:
            problems.append(f"key '{where}': {value!r} is not a finite number")
        if path and path[0] == "data" and path[-1] == "local" and isinstance(value, str):
            target = Path(value) if Path(value).is_absolute() else base_dir / value
            if not target.exists():
                problems.append(f"key '{where}': local dataset path {value!r} does not exist "
                                f"(resolved to {target.resolve()})")
    return problems


def _describe(error: ValidationError) -> str:
    where = ".".join(str(part) for part in error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = set(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - allowed)
        prefix = f"{where}." if where else ""
        return "; ".join(f"unknown key '{prefix}{key}' (allowed here: {sorted(allowed)})" for key in unknown)
    if error.validator == "required":
        return f"missing key '{where + '.' if where else ''}{error.message.split(chr(39))[1]}'"
    return f"key '{where or '<root>'}': {error.message}"


def validate_config(config: MutableMapping[str, Any], schema_path: str | os.PathLike[str],
                    base_dir: str | os.PathLike[str] | None = None) -> MutableMapping[str, Any]:
    """Validate ``config`` in place (filling defaults); raise :class:`ConfigError` naming every bad key.

    Relative ``local`` paths are resolved against ``base_dir`` (default: the working directory, as jobs do).
    """
    schema = load_schema(schema_path)
    errors = sorted(_DefaultingValidator(schema).iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    reported = {".".join(map(str, e.absolute_path)) for e in errors}
    lines = [_describe(e) for e in errors] + _value_problems(config, Path(base_dir or os.getcwd()), reported)
    if not errors and isinstance(config.get("tracking"), MutableMapping):
        lines += missing_backend_packages(config["tracking"].get("backends", []))
    if lines:
        listing = "\n".join(f"  - {line}" for line in lines)
        raise ConfigError(f"invalid config (schema {Path(schema_path)}):\n{listing}")
    return config
