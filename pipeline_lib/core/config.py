"""Config validation against ``workflow/schemas/config.schema.yaml``, with errors that name the key.

Snakemake's ``validate`` prints the whole schema after the message; this reports each problem as one line with the
dotted key path, and fills the defaults (the paper's run, App. B; ``config/config.yaml`` is an overlay). It is
stricter than JSON Schema, so a bad value fails ``snakemake -n`` rather than a job: no NaN or infinities, no float or
boolean for an integer, and every key that names a file, a task, a method or a data source must name one that exists.
"""

from __future__ import annotations

import copy
import functools
import math
import os
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, ValidationError, validators

from pipeline_lib.core.data.tiny import TASKS as _TINY_TASKS
from pipeline_lib.core.rl.estimators import schema_properties
from pipeline_lib.core.run_spec import RL_KNOBS, SFT_KNOBS, RLSettings, SFTSettings
from pipeline_lib.core.tracking import missing_backend_packages
from pipeline_lib.core.yaml_files import load_yaml

__all__ = ["DATASET_SOURCES", "DATA_SUFFIXES", "SCHEMA_PATH", "ConfigError", "check_config_files", "load_config_file",
           "load_schema", "merge_config", "schema_defaults", "schema_path", "validate_config", "with_estimator_params"]

#: The config schema, relative to the workflow's directory (the current one when Snakemake or the plan CLI runs).
SCHEMA_PATH = Path("workflow") / "schemas" / "config.schema.yaml"

#: The source roles each dataset's builder reads (:mod:`pipeline_lib.core.data.real`) and the splits it reads from each.
DATASET_SOURCES: dict[str, dict[str, tuple[str, ...]]] = {
    "gsm8k": {"main": ("train", "test"), "demonstrations": ("train",)},
    "countdown": {"main": ("train",), "gold": ("train",)},
    "deepmath": {"main": ("train",)},
    "poetry": {"main": ("train",)},
    "meetingbank": {"main": ("train",)},
    "openthoughts": {"main": ("train",)},
}
#: The local data file formats (:mod:`pipeline_lib.core.data.sources` has a reader for each).
DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv")


class ConfigError(ValueError):
    """The config does not match the schema; the message lists every offending key."""


def load_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """One config file: a mapping of keys at the top level (an empty file is ``{}``)."""
    content = load_yaml(path, "config file", ConfigError, aliases=False)
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys (label:, data:, train: ...) at its top "
                          f"level, not a {type(content).__name__}")
    return content


def merge_config(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``update`` into ``base`` recursively, as Snakemake merges ``--configfile A B``."""
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            merge_config(base[key], value)
        else:
            base[key] = value
    return base


def check_config_files(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Re-read the config files Snakemake loaded (its loader keeps the last of two equal keys; this one names them),
    and stop a lone overlay: a ``--configfile`` on the command line replaces the profile's config/config.yaml, so one
    key alone would run the paper plan. One file must be a base: a shipped one, or one that sets ``label`` or
    ``preflight``."""
    shipped = {(Path.cwd() / "config" / name).resolve() for name in ("config.yaml", "paper.yaml", "preflight.yaml")}
    paths = list(paths)
    contents = [load_config_file(path) for path in paths]
    if paths and not any(Path(path).resolve() in shipped or "label" in content or "preflight" in content
                         for path, content in zip(paths, contents, strict=True)):
        given = " ".join(_shown(path) for path in paths)
        raise ConfigError(
            f"{given}: no base config among the config files (config/config.yaml, config/paper.yaml, "
            "config/preflight.yaml, or a file that sets `label` or `preflight`). A --configfile on the command line "
            "replaces the profile's config/config.yaml, so this would overlay the schema's defaults: the paper plan. "
            "Name a base first: "
            f"`snakemake --configfile config/config.yaml {given}` (the tiny default) or "
            f"`snakemake --configfile config/paper.yaml {given}` (the paper)")


def _shown(path: str | os.PathLike[str]) -> str:
    """``path`` relative to the working directory where it lies under it (as a person typed it)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def load_schema(path: str | os.PathLike[str]) -> dict[str, Any]:
    return load_yaml(path, "config schema", ConfigError)


def schema_path() -> Path:
    """The schema of the workflow run from the current directory (as Snakemake reads it), else this checkout's (a
    copy of the package run elsewhere reads the workflow it runs in)."""
    return SCHEMA_PATH if SCHEMA_PATH.is_file() else Path(__file__).resolve().parents[2] / SCHEMA_PATH


def _defaults_of(node: Mapping[str, Any]) -> Any:
    default = copy.deepcopy(node.get("default"))
    if isinstance(default, dict) and "properties" in node:
        default |= {k: _defaults_of(sub) for k, sub in node["properties"].items() if "default" in sub}
    return default


@functools.cache
def _block_defaults(path: str, keys: tuple[str, ...]) -> dict[str, Any]:
    node = load_schema(path)
    for key in keys:
        node = node["properties"][key]
    return {k: _defaults_of(sub) for k, sub in node["properties"].items() if "default" in sub}


def schema_defaults(*keys: str, schema: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The schema's defaults for the block at ``keys`` (``"site"``), nested blocks' filled as validation fills them,
    for code that needs a default without a validated config."""
    return copy.deepcopy(_block_defaults(str(schema or schema_path()), keys))


def with_estimator_params(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with each declared estimator's parameters as properties of a ``train.methods`` entry: the parameter
    dataclasses are their one declaration, so a new estimator's parameter needs no schema edit."""
    entry = schema.get("properties", {}).get("train", {}).get("properties", {}).get("methods", {}).get(
        "additionalProperties")
    if isinstance(entry, dict) and "properties" in entry:
        entry["properties"] = {**entry["properties"], **schema_properties()}
    return schema


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


def _local_source_problem(value: str, splits: tuple[str, ...], base_dir: Path) -> str | None:
    """What is wrong with a ``local:`` dataset path (None when a builder can read every split it needs from it)."""
    if not value.strip():
        return "an empty local path (would silently read the hub): give a file or directory, or null for the hub"
    target = Path(value) if Path(value).is_absolute() else base_dir / value
    if not target.exists():
        return f"local dataset path {value!r} does not exist (resolved to {target.resolve()})"
    if target.is_file():
        if target.suffix not in DATA_SUFFIXES:
            return f"local dataset file {value!r} has suffix {target.suffix!r}; readable: {list(DATA_SUFFIXES)}"
        if len(splits) > 1:
            return f"a single file holds one split, but this source needs splits {list(splits)}: give a directory"
        return None
    missing = [s for s in splits if not any((target / f"{s}{suffix}").is_file() for suffix in DATA_SUFFIXES)]
    if missing:
        return (f"local dataset directory {value!r} has no file for split(s) {missing} (expected "
                f"{'/'.join(f'{missing[0]}{x}' for x in DATA_SUFFIXES)})")
    return None


#: Keys (besides datasets' ``local`` and the calibration ratings) that name a file or folder read from this machine.
#: (``imagenet.dataset.root`` is checked by its own job: config/paper.yaml ships a placeholder to be filled in.)
_PATH_KEYS = {("train", "baselines", "iterative_dpo", "accelerate_config"): "file",
              ("eval", "transfer", "lm_eval", "include_path"): "folder"}


def _section(config: Any, *keys: str) -> Any:
    """``config[k1][k2]...``, or ``{}`` where a level is missing or not a mapping (the schema reports that)."""
    for key in keys:
        config = config.get(key, {}) if isinstance(config, Mapping) else {}
    return config


def _named_problems(config: Mapping[str, Any], base_dir: Path) -> list[str]:
    """Keys that name a source role, a file or a task: each must name one that exists."""
    problems = []
    datasets = _section(config, "data", "datasets")
    for name, spec in datasets.items() if isinstance(datasets, dict) else ():
        sources = _section(spec, "sources")
        roles = DATASET_SOURCES.get(name, {})
        if not isinstance(sources, dict):
            continue
        for role, source in sources.items():
            where = f"data.datasets.{name}.sources.{role}"
            if role not in roles:
                problems.append(f"key '{where}': unknown source role {role!r} of {name} (its builder reads "
                                f"{sorted(roles)})")
            elif isinstance(source, dict) and isinstance(source.get("local"), str):
                problem = _local_source_problem(source["local"], roles[role], base_dir)
                if problem:
                    problems.append(f"key '{where}.local': {problem}")
        if isinstance(spec, dict) and spec.get("enabled"):
            problems += [f"missing key 'data.datasets.{name}.sources.{role}' (dataset {name} is enabled and its "
                         f"builder reads this source)" for role in roles if role not in sources]
            problems += [f"key 'data.datasets.{name}.sources.{role}': names neither a hub dataset (`hub`) nor a "
                         "`local` path" for role, source in sources.items()
                         if role in roles and isinstance(source, dict) and not source.get("local")
                         and not str(source.get("hub", "")).strip()]
    judged = _section(config, "judge").get("tasks", [])
    ratings_by_task = _section(config, "judge", "calibration", "ratings")
    for task, ratings in ratings_by_task.items() if isinstance(ratings_by_task, dict) else ():
        where = f"judge.calibration.ratings.{task}"
        if not isinstance(judged, list) or task not in judged:
            problems.append(f"key '{where}': {task!r} is not a judged task (judge.tasks: {judged})")
        if isinstance(ratings, str):
            target = Path(ratings) if Path(ratings).is_absolute() else base_dir / ratings
            if not target.is_file():
                problems.append(f"key '{where}': ratings file {ratings!r} does not exist (resolved to "
                                f"{target.resolve()}); leave the task out until its ratings are downloaded")
    for keys, kind in _PATH_KEYS.items():  # other keys that name a file or folder the pipeline reads
        value = _section(config, *keys[:-1]).get(keys[-1])
        if isinstance(value, str):
            target = Path(value) if Path(value).is_absolute() else base_dir / value
            if not (target.is_dir() if kind == "folder" else target.is_file()):
                problems.append(f"key '{'.'.join(keys)}': {kind} {value!r} does not exist (resolved to "
                                f"{target.resolve()})")
    for path, value in _walk(config):  # a reward composition (task default or a -Sim method's) must reward something
        if (("reward_weights" in path[:-1] or path[-1:] == ("similarity_weights",)) and isinstance(value, dict)
                and value and all(isinstance(w, int | float) for w in value.values())
                and not any(w > 0 for w in value.values())):
            problems.append(f"key '{'.'.join(path)}': no positive weight, so every rollout would score 0")
    return problems


#: float32's smallest normal and largest finite numbers: a temperature outside them is 0 or inf where training runs
#: (``R / tau`` is NaN for the group's best rollout: 0 / 0), whatever float64 made of it at parse time.
FLOAT32_TINY = 2.0**-126
FLOAT32_MAX = (2 - 2.0**-23) * 2.0**127
#: The keys holding a training temperature (``tau``; a list of them under ``taus``) or a sampling temperature (the
#: schema's own keys: an endpoint's free-form ``sampling`` may say 0 for greedy).
_TEMPERATURE_KEYS = ("tau", "taus", "temperature")
#: Keys that name tasks (lists, or one name): each must be a tiny task or a configured dataset.
_TASK_KEYS = (("train", "tasks"), ("train", "baselines", "tasks"), ("train", "ablation", "tasks"),
              ("train", "scale", "tasks"), ("judge", "tasks"), ("eval", "transfer", "task"))
#: Methods that are neither ``train.methods`` entries nor baselines (core cannot read the registry; the plan passes
#: its own, :func:`validate_config`'s ``untrained``).
_UNTRAINED_METHODS = ("base", "sft")


def _temperature_problems(config: Mapping[str, Any]) -> list[str]:
    problems = []
    for path, value in _walk(config):
        key = path[-2] if len(path) > 1 and path[-2] == "taus" else path[-1] if path else ""
        if (key not in _TEMPERATURE_KEYS or "sampling" in path or not isinstance(value, int | float)
                or isinstance(value, bool) or not math.isfinite(value) or value <= 0):
            continue  # the schema reports a non-number, a non-finite or a non-positive one
        if value < FLOAT32_TINY:
            problems.append(f"key '{'.'.join(path)}': temperature {value!r} is below float32's smallest normal number "
                            f"({FLOAT32_TINY:.4g}): training computes in float32, where it is (nearly) 0 and R / "
                            "temperature is NaN")
        elif value > FLOAT32_MAX:
            problems.append(f"key '{'.'.join(path)}': temperature {value!r} is beyond float32's range "
                            f"({FLOAT32_MAX:.4g}): it is inf where training runs")
    return problems


def _names(value: Any) -> list[Any]:
    return [value] if isinstance(value, str) else list(value) if isinstance(value, list) else []


def _model_problems(where: str, model: Mapping[str, Any]) -> list[str]:
    """A model size the local engine can build: whole key/value head groups and an even head width (RoPE)."""
    hidden, heads, kv_heads = model.get("hidden_size"), model.get("heads"), model.get("kv_heads")
    if not all(isinstance(v, int) and v > 0 for v in (hidden, heads, kv_heads)):
        return []
    problems = []
    if heads % kv_heads:
        problems.append(f"key '{where}.kv_heads': {kv_heads} does not divide {where}.heads = {heads} (grouped-query "
                        "attention shares each key/value head among a whole number of query heads)")
    if hidden % heads or (hidden // heads) % 2:
        problems.append(f"key '{where}.heads': hidden_size {hidden} / heads {heads} must be a whole, even head width "
                        "(rotary position embeddings rotate pairs of dimensions)")
    return problems


def _semantic_problems(config: Mapping[str, Any], untrained: Sequence[str] = _UNTRAINED_METHODS) -> list[str]:
    """What the schema cannot say: names that must exist, sizes that must divide, numbers that must fit float32 or
    stay within another key's value. Runs only on a config the schema accepted (every section is in place)."""
    problems = _temperature_problems(config)
    train, data, judge, evaluation = (_section(config, key) for key in ("train", "data", "judge", "eval"))
    tasks = set(_section(data, "tiny").get("tasks") or []) | set(_TINY_TASKS) | set(_section(data, "datasets"))
    baselines = _section(train, "baselines")
    task_keys = [*_TASK_KEYS, *(("train", "baselines", name, "tasks") for name, section in baselines.items()
                                if isinstance(section, dict))]
    for keys in task_keys:
        unknown = [t for t in _names(_section(config, *keys[:-1]).get(keys[-1])) if t not in tasks]
        if unknown:
            problems.append(f"key '{'.'.join(keys)}': unknown task(s) {unknown}; a task is a tiny task or a "
                            f"data.datasets entry: {sorted(tasks)}")
    for keys in (("train", "task_settings"), ("judge", "rubrics"), ("judge", "pairwise")):
        unknown = [t for t in _section(config, *keys) if t not in tasks]
        if unknown:
            problems.append(f"key '{'.'.join(keys)}': entries for unknown task(s) {unknown}; known: {sorted(tasks)}")
    unrubricked = [t for t in _names(judge.get("tasks")) if t not in _section(judge, "rubrics")]
    if unrubricked:
        problems.append(f"key 'judge.tasks': {unrubricked} have no judge.rubrics entry (the rubric to judge them by)")
    rl_methods = list(_section(train, "methods"))
    known = list(dict.fromkeys([*untrained, *rl_methods, *_names(baselines.get("methods"))]))
    anything = f"{', '.join(untrained)}, a train.methods key or a baseline"
    for keys, allowed, what in ((("judge", "methods"), known, anything), (("eval", "transfer", "methods"), known,
                                                                          anything),
                                (("train", "scale", "methods"), rl_methods, "a train.methods key")):
        unknown = [m for m in _names(_section(config, *keys[:-1]).get(keys[-1])) if m not in allowed]
        if unknown:
            problems.append(f"key '{'.'.join(keys)}': unknown method(s) {unknown}; each is {what}: {allowed}")
    for task, entry in _section(train, "task_settings").items():
        unknown = [m for m in _names(_section(entry, "methods") and entry["methods"]) if m not in rl_methods]
        if unknown:
            problems.append(f"key 'train.task_settings.{task}.methods': unknown method(s) {unknown}; train.methods "
                            f"has {rl_methods}")
        if isinstance(entry, Mapping) and entry.get("engine") == "verl" and train.get("engine") != "verl":
            problems.append(f"key 'train.task_settings.{task}.engine': verl, but train.engine is "
                            f"{train.get('engine')!r} (a task trains on verl only in a verl config)")
    judged_seeds, seeds = judge.get("seeds"), _names(train.get("seeds"))
    if isinstance(judged_seeds, list) and set(judged_seeds) - set(seeds):
        problems.append(f"key 'judge.seeds': {sorted(set(judged_seeds) - set(seeds))} are not train.seeds {seeds} "
                        "(the judge scores the main runs' outputs)")
    samples = evaluation.get("samples")
    too_large = [k for k in _names(evaluation.get("pass_k")) if isinstance(samples, int) and k > samples]
    if too_large:
        problems.append(f"key 'eval.pass_k': {too_large} exceed eval.samples = {samples} (pass@k needs k samples per "
                        "prompt)")
    lm_eval = _section(evaluation, "transfer", "lm_eval")
    stray = sorted(set(_section(lm_eval, "num_fewshot")) - set(_names(lm_eval.get("tasks"))))
    if stray:
        problems.append(f"key 'eval.transfer.lm_eval.num_fewshot': task(s) {stray} are not in "
                        f"eval.transfer.lm_eval.tasks {_names(lm_eval.get('tasks'))} (a misspelt task would run at "
                        "its default)")
    model = _section(train, "model")
    problems += _model_problems("train.model", model)
    overrides = [(f"train.scale.models.{name}.model", _section(entry, "model"))
                 for name, entry in _section(train, "scale", "models").items()]
    overrides.append(("train.baselines.opd.teacher.model", _section(baselines, "opd", "teacher", "model")))
    for where, override in overrides:
        unknown = sorted(set(override) - set(model))
        if unknown:
            problems.append(f"unknown key(s) {[f'{where}.{k}' for k in unknown]} (allowed here: {sorted(model)})")
        elif override:
            problems += _model_problems(where, {**model, **override})
    return problems


def _value_problems(config: MutableMapping[str, Any], base_dir: Path, reported: set[str]) -> list[str]:
    """Non-finite floats the schema did not type, and keys naming a file, a task or a role that does not exist."""
    problems = []
    for path, value in _walk(config):
        where = ".".join(path)
        if isinstance(value, float) and not math.isfinite(value) and where not in reported:
            problems.append(f"key '{where}': {value!r} is not a finite number")
    return problems + _named_problems(config, base_dir)


#: Old key -> new key (one name on both engines, the paper's terms; M one name in every study): a config still using
#: an old name is told its new one.
RENAMED_KEYS = {"kl_coef": "beta", "kl_loss_type": "kl_estimator", "loss_agg_mode": "aggregation",
                "batch_size": "prompts_per_step", "save_freq": "checkpoint_every",
                "max_new_tokens": "max_response_tokens", "rollouts": "group_sizes"}


#: Sections moved to one block per concern for both engines: old dotted key -> where it lives now.
MOVED_KEYS = {"train.verl.rl": "train.rl (verl's own knobs: train.rl.verl)",
              "train.verl.sft": "train.sft (verl's own knobs: train.sft.verl)",
              "train.verl.tasks": "train.task_settings (a row's settings under its rl / sft)"}


#: Keys that no longer mean anything: the last parts of a dotted key -> why, and what to do instead.
REMOVED_KEYS = {"serve.port": "a started server listens on a free port chosen at start, so two jobs on one node never "
                              "collide (issue 44): drop the key"}


def _removed_key(where: str, key: str) -> str | None:
    dotted = f"{where}{key}"
    return next((why for suffix, why in REMOVED_KEYS.items() if dotted == suffix or dotted.endswith("." + suffix)),
                None)


def _moved_key(where: str, key: str) -> str | None:
    """Where an old key lives now: a moved section, an engine's knob under ``train.rl.<engine>`` /
    ``train.sft.<engine>``, or an old flat task-row key under the row's ``rl`` / ``sft``."""
    dotted = f"{where}{key}"
    if dotted in MOVED_KEYS:
        return MOVED_KEYS[dotted]
    parts = where.rstrip(".").split(".")
    concern = parts[-1] if len(parts) in (2, 4) else None
    if parts[0] == "train" and concern in ("rl", "sft") and (len(parts) == 2 or parts[1] == "task_settings"):
        for engine, knobs in (RL_KNOBS if concern == "rl" else SFT_KNOBS).items():
            if key in {f.name for f in fields(knobs)}:
                return f"{where}{engine}.{key}"
    if len(parts) == 3 and parts[:2] == ["train", "task_settings"]:
        if RENAMED_KEYS.get(key) in {f.name for f in fields(RLSettings)}:  # an old row's RL name (batch_size)
            return f"{where}rl.{RENAMED_KEYS[key]}"
        for concern, shared, knobs_by_engine in (("rl", RLSettings, RL_KNOBS), ("sft", SFTSettings, SFT_KNOBS)):
            if key in {f.name for f in fields(shared)} - {"knobs"}:
                return f"{where}{concern}.{key}"
            for engine, knobs in knobs_by_engine.items():
                if key in {f.name for f in fields(knobs)}:
                    return f"{where}{concern}.{engine}.{key}"
    return None


def _unknown_key(where: str, key: str, allowed: set[str]) -> str:
    new = RENAMED_KEYS.get(key)
    moved = _moved_key(where, key)
    removed = _removed_key(where, key)
    hint = f"renamed: use '{new}'; " if new in allowed else f"moved: use '{moved}'; " if moved else \
        f"removed: {removed}; " if removed else ""
    return f"unknown key '{where}{key}' ({hint}allowed here: {sorted(allowed)})"


def _describe(error: ValidationError) -> str:
    where = ".".join(str(part) for part in error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = set(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - allowed)
        prefix = f"{where}." if where else ""
        return "; ".join(_unknown_key(prefix, key, allowed) for key in unknown)
    if error.validator == "required":
        return f"missing key '{where + '.' if where else ''}{error.message.split(chr(39))[1]}'"
    if error.validator == "pattern":  # a name or id that would become a path, wildcard or command argument
        what = error.schema.get("description", "").split(":")[0] or "a value of this key"
        return (f"key '{where or '<root>'}': {error.instance!r} does not match {error.validator_value} ({what}); "
                "rename it")
    return f"key '{where or '<root>'}': {error.message}"


def validate_config(config: MutableMapping[str, Any], schema_path: str | os.PathLike[str],
                    base_dir: str | os.PathLike[str] | None = None,
                    untrained: Sequence[str] = _UNTRAINED_METHODS) -> MutableMapping[str, Any]:
    """Validate ``config`` in place (filling defaults); raise :class:`ConfigError` naming every bad key. Relative
    paths resolve against ``base_dir`` (default: the working directory); ``untrained`` are the methods a study may
    name besides ``train.methods`` and the baselines (the plan passes the registry's Base and SFT)."""
    schema = with_estimator_params(load_schema(schema_path))
    errors = sorted(_DefaultingValidator(schema).iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    reported = {".".join(map(str, e.absolute_path)) for e in errors}
    lines = [_describe(e) for e in errors] + _value_problems(config, Path(base_dir or os.getcwd()), reported)
    if not errors and isinstance(config.get("tracking"), MutableMapping):
        lines += missing_backend_packages(config["tracking"].get("backends", []))
    if not errors:
        lines += _semantic_problems(config, untrained)
    if lines:
        listing = "\n".join(f"  - {line}" for line in lines)
        raise ConfigError(f"invalid config (schema {Path(schema_path)}):\n{listing}")
    return config
