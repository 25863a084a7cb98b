"""Config mistakes that used to pass parse time (issue 28): data sources with an empty, missing or unreadable local
path or a role typo, reward weights naming no task or reward, ratings and accelerate files that do not exist,
duplicate YAML keys, and config files that are not a YAML mapping each fail naming the file, line or key
(``python -m pipeline_lib plan`` in one sentence, ``snakemake -n`` too); the config's source roles and suffixes are
the builders' and readers'. The cases are rows of docs/hostile_cases.md."""

from __future__ import annotations

import pytest


def _validate(config, base_dir):
    from pipeline_lib.core.config import validate_config
    from tests.conftest import REPO

    return validate_config(config, REPO / "workflow/schemas/config.schema.yaml", base_dir=base_dir)


def _with_source(dataset, role, local, enabled=True, extra_roles=None):
    from tests.conftest import _tiny_config, real_spec

    config = _tiny_config()
    sources = {r: {k: v for k, v in s.items()} for r, s in real_spec(dataset)["sources"].items()}
    if role is not None:
        sources[role] = {**sources.get(role, {"hub": "x"}), "local": local}
    sources.update(extra_roles or {})
    config["data"]["datasets"][dataset] = {"enabled": enabled, "sources": sources}  # the others stay off
    return config


def _ratings(tasks, path):
    from tests.conftest import _tiny_config

    config = _tiny_config()
    config["judge"].setdefault("calibration", {})["ratings"] = dict.fromkeys(tasks, path)
    return config


def _weights(weights):
    from tests.conftest import _tiny_config

    config = _tiny_config()
    config["data"]["tiny"]["reward_weights"] = weights
    return config


def _accelerate_config(path):
    from tests.conftest import _tiny_config

    config = _tiny_config()
    config["train"]["baselines"]["iterative_dpo"] = {"accelerate_config": path}
    return config


CONFIG_MISTAKES = {  # name: (config maker taking tmp_path, key the error names, what it says)
    "empty_local_goes_to_hub": (lambda t: _with_source("deepmath", "main", ""),
                                "data.datasets.deepmath.sources.main.local", "empty local path"),
    "blank_local": (lambda t: _with_source("deepmath", "main", "  "), "data.datasets.deepmath.sources.main.local",
                    "empty local path"),
    "directory_without_data": (lambda t: _with_source("deepmath", "main", str(t)),
                               "data.datasets.deepmath.sources.main.local", "has no file for split(s) ['train']"),
    "directory_missing_a_split": (lambda t: (t.joinpath("train.jsonl").write_text("{}\n"),
                                             _with_source("gsm8k", "main", str(t)))[1],
                                  "data.datasets.gsm8k.sources.main.local", "no file for split(s) ['test']"),
    "wrong_suffix": (lambda t: (t.joinpath("train.tsv").write_text("a\tb\n"),
                                _with_source("deepmath", "main", str(t / "train.tsv")))[1],
                     "data.datasets.deepmath.sources.main.local", "has suffix '.tsv'"),
    "role_typo": (lambda t: _with_source("gsm8k", None, None, extra_roles={"demonstration": {"hub": "x"}}),
                  "data.datasets.gsm8k.sources.demonstration", "unknown source role 'demonstration'"),
    "enabled_without_a_role": (lambda t: (lambda c: (c["data"]["datasets"]["gsm8k"]["sources"].pop("demonstrations"),
                                                     c)[1])(_with_source("gsm8k", None, None)),
                               "data.datasets.gsm8k.sources.demonstrations", "builder reads this source"),
    "enabled_source_without_hub_or_local": (lambda t: _with_source("deepmath", None, None,
                                                                   extra_roles={"main": {"hub": " "}}),
                                            "data.datasets.deepmath.sources.main", "names neither a hub dataset"),
    "reward_weights_task_typo": (lambda t: _weights({"countdwn_tiny": {"countdown": 1.0}}),
                                 "data.tiny.reward_weights", "'countdwn_tiny' is not one of"),
    "reward_name_typo": (lambda t: _weights({"arith_tiny": {"maths": 1.0}}), "data.tiny.reward_weights.arith_tiny",
                         "'maths' is not one of"),
    "negative_weight": (lambda t: _weights({"arith_tiny": {"math": -1.0}}),
                        "data.tiny.reward_weights.arith_tiny.math", "less than the minimum of 0"),
    "all_zero_weights": (lambda t: _weights({"arith_tiny": {"math": 0.0}}), "data.tiny.reward_weights.arith_tiny",
                         "no positive weight"),
    "ratings_path_typo": (lambda t: _ratings(["meeting_tiny"], "ratings/meeting_tiny.csv"),
                          "judge.calibration.ratings.meeting_tiny", "ratings file 'ratings/meeting_tiny.csv' does not"),
    "accelerate_config_typo": (lambda t: _accelerate_config("configs/zero3.yml"),
                               "train.baselines.iterative_dpo.accelerate_config",
                               "file 'configs/zero3.yml' does not exist"),
    "ratings_task_typo": (lambda t: (t.joinpath("r.csv").write_text("item_id\n"),
                                     _ratings(["meetng_tiny"], str(t / "r.csv")))[1],
                          "judge.calibration.ratings.meetng_tiny", "is not a judged task"),
}


@pytest.mark.parametrize("name", sorted(CONFIG_MISTAKES))
def test_config_mistakes_fail_at_parse_time_naming_the_key(tmp_path, name):
    from pipeline_lib.core.config import ConfigError

    make, key, says = CONFIG_MISTAKES[name]
    with pytest.raises(ConfigError) as excinfo:
        _validate(make(tmp_path), tmp_path)
    line = next((line for line in str(excinfo.value).splitlines() if f"'{key}'" in line), "")
    assert says in line, str(excinfo.value)


def test_the_shipped_configs_and_a_complete_local_source_still_validate(tmp_path):
    from tests.conftest import REPO, _tiny_config

    assert _validate(_tiny_config(), REPO)["label"] == "tiny"  # valid, defaults filled
    sources = _validate(_with_source("gsm8k", None, None), tmp_path)["data"]["datasets"]["gsm8k"]["sources"]
    assert {"main", "demonstrations"} <= set(sources)  # the fixtures: directories with every split
    (tmp_path / "ratings.csv").write_text("item_id\n")
    ratings = _validate(_ratings(["meeting_tiny"], str(tmp_path / "ratings.csv")), tmp_path)
    assert ratings["judge"]["calibration"]["ratings"] == {"meeting_tiny": str(tmp_path / "ratings.csv")}


def test_schema_reward_names_are_the_registered_rewards():
    from pipeline_lib.core.config import load_schema
    from pipeline_lib.core.rewards import available_rewards
    from tests.conftest import REPO

    schema = load_schema(REPO / "workflow/schemas/config.schema.yaml")
    assert schema["$defs"]["reward_weights"]["propertyNames"]["enum"] == available_rewards()


@pytest.mark.parametrize("text, says", [
    ("train:\n  methods:\n    softmax_exact: {advantage: softmax, tau: 0.1, tau: 50.0}\n",
     "line 3, column 51: duplicate key 'tau' (first given on line 3)"),
    ("seed: 0\ntheory:\n  group_size: 8\nseed: 3\n", "line 4, column 1: duplicate key 'seed' (first given on line 1)"),
])
def test_duplicate_yaml_keys_are_an_error_naming_the_line(tmp_path, text, says):
    from pipeline_lib.core.config import ConfigError, load_config_file

    (tmp_path / "dup.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"dup\.yaml, " + says.replace("(", r"\(").replace(")", r"\)")):
        load_config_file(tmp_path / "dup.yaml")


def test_yaml_merge_keys_still_load_and_may_be_overridden(tmp_path):
    """The Slurm profile shares resources through anchors and ``<<:`` merges; a merged key overridden in the mapping
    itself is YAML's intent, not a duplicate."""
    from pipeline_lib.core.yaml_files import YAMLFileError, load_yaml
    from pipeline_lib.plan.table import load_profile

    (tmp_path / "merge.yaml").write_text("base: &gpu {mem_mb: 100, runtime: 60}\n"
                                         "job: {<<: *gpu, runtime: 120}\n")
    assert load_yaml(tmp_path / "merge.yaml")["job"] == {"mem_mb": 100, "runtime": 120}
    (tmp_path / "merge.yaml").write_text("base: &gpu {mem_mb: 100}\njob: {<<: *gpu, runtime: 1, runtime: 2}\n")
    with pytest.raises(YAMLFileError, match="duplicate key 'runtime'"):
        load_yaml(tmp_path / "merge.yaml")
    assert load_profile()["set-resources"]  # the shipped profile uses merges


@pytest.mark.parametrize("content, says", [
    (None, "config file {path} does not exist"),
    ("- label: tiny\n- seed: 0\n", "must hold a mapping of keys (label:, data:, train: ...) at its top level, "
                                   "not a list"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "line 1: not UTF-8 text (byte 0 is b'\\x89')"),
    (b"seed: 0\x00\x00", "holds NUL bytes"),
    ("seed: [0, 1\n", "line 2, column 1: expected ',' or ']'"),
    ("dup: 1\ndup: 2\n", "duplicate key 'dup'"),
], ids=["missing", "list_rooted", "binary", "nul_bytes", "bad_yaml", "duplicate_key"])
def test_plan_on_a_bad_config_file_prints_a_sentence_not_a_traceback(tmp_path, content, says):
    import subprocess
    import sys

    from tests.conftest import REPO, repo_env

    path = tmp_path / "config.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    result = subprocess.run([sys.executable, "-m", "pipeline_lib", "plan", "--configfile", str(path)], cwd=REPO,
                            capture_output=True, text=True, timeout=120, env=repo_env())
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("python -m pipeline_lib plan: ") and str(path) in result.stderr
    assert says.format(path=path) in result.stderr, result.stderr


def test_snakemake_refuses_a_config_file_with_a_duplicate_key(workflow_copy):
    import subprocess
    import sys

    from tests.conftest import repo_env

    tiny = (workflow_copy / "config/config.yaml").read_text()
    (workflow_copy / "dup.yaml").write_text(tiny + "label: test\n")  # `label: tiny` is already at the top
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "dup.yaml"], cwd=workflow_copy,
                            capture_output=True, text=True, timeout=300, env=repo_env())
    assert result.returncode != 0
    assert "dup.yaml" in result.stdout + result.stderr and "duplicate key 'label'" in result.stdout + result.stderr
    assert "Job stats" not in result.stdout


def test_the_configs_source_roles_and_suffixes_are_the_builders_and_readers():
    from pipeline_lib.core.config import DATA_SUFFIXES, DATASET_SOURCES
    from pipeline_lib.core.data.real import BUILDERS
    from pipeline_lib.core.data.sources import _READERS
    from tests.conftest import real_spec

    assert set(DATA_SUFFIXES) == set(_READERS)
    assert set(DATASET_SOURCES) == set(BUILDERS)
    for name, roles in DATASET_SOURCES.items():  # the fixtures every builder is tested on name exactly these roles
        assert set(real_spec(name)["sources"]) == set(roles), name
