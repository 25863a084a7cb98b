"""Config validation against ``workflow/schemas/config.schema.yaml``, with errors that name the key.

Snakemake's own ``validate`` prints the whole schema after the message; this one
reports each problem as one line with the dotted key path, and fills defaults.
"""

from __future__ import annotations

import copy
import os
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, ValidationError, validators

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


_DefaultingValidator = _with_defaults(Draft202012Validator)


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


def validate_config(config: MutableMapping[str, Any], schema_path: str | os.PathLike[str]) -> MutableMapping[str, Any]:
    """Validate ``config`` in place (filling defaults); raise :class:`ConfigError` naming every bad key."""
    schema = load_schema(schema_path)
    errors = sorted(_DefaultingValidator(schema).iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = "\n".join(f"  - {_describe(e)}" for e in errors)
        raise ConfigError(f"invalid config (schema {Path(schema_path)}):\n{lines}")
    return config
