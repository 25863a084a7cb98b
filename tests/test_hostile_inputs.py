"""Hostile and careless inputs, round two (issue 28): state files a killed writer left half-written, config
mistakes that used to pass parse time, data rows of every kind of bad, and sidecars or configs that are not what
they claim. Each gets a sentence naming the file, row or key, or is set aside and recomputed; none crashes every
rerun. The table of these cases is docs/hostile_cases.md."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from pipeline_lib.core.checkpoint import MetricsLog

# --- resume state: a torn or corrupt file is set aside, never a wedge -------------------------------------------

def _kill_after_step_10(monkeypatch, run_dir):
    from pipeline_lib.jobs.classify import train as train_module
    from tests.conftest import CLASSIFY_PARAMS, classify_spec

    real_save = train_module.save_checkpoint

    def save_then_die(directory, state):
        real_save(directory, state)
        if state["step"] == 10:
            raise KeyboardInterrupt("simulated kill after the step-10 checkpoint")

    monkeypatch.setattr(train_module, "save_checkpoint", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        train_module.train(classify_spec("softmax", 8), 0, run_dir, progress=False, params=CLASSIFY_PARAMS)
    monkeypatch.setattr(train_module, "save_checkpoint", real_save)


@pytest.mark.parametrize("damage", ["torn_metrics_line", "truncated_checkpoint", "binary_metrics_tail"])
def test_a_rerun_after_a_killed_writer_finishes_and_matches_the_uninterrupted_run(tmp_path, monkeypatch, damage):
    from pipeline_lib.jobs.classify import train as train_module
    from tests.conftest import CLASSIFY_PARAMS, classify_spec, final_parameters

    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    train_module.train(classify_spec("softmax", 8), 0, straight, progress=False, params=CLASSIFY_PARAMS)
    _kill_after_step_10(monkeypatch, interrupted)
    metrics, checkpoint = interrupted / "metrics.jsonl", interrupted / "checkpoint.pt"
    if damage == "torn_metrics_line":  # the writer died mid-line (or the disk filled)
        metrics.write_text(metrics.read_text() + '{"step": 11, "loss": 0.12')
    elif damage == "binary_metrics_tail":
        metrics.write_bytes(metrics.read_bytes() + b'{"step": 11, "loss": "\xe2\x82')
    else:
        checkpoint.write_bytes(checkpoint.read_bytes()[: checkpoint.stat().st_size // 2])
    for _ in range(2):  # the rerun, and a forced rerun of a finished run, both finish
        train_module.train(classify_spec("softmax", 8), 0, interrupted, progress=False, params=CLASSIFY_PARAMS)
    for key, value in final_parameters(straight).items():
        torch.testing.assert_close(value, final_parameters(interrupted)[key])
    assert (straight / "metrics.jsonl").read_text() == metrics.read_text()
    aside = sorted(p.name for p in interrupted.iterdir() if ".unreadable-" in p.name)
    assert len(aside) == 1 and aside[0].startswith(metrics.name if "metrics" in damage else checkpoint.name), aside


def test_metrics_log_keeps_the_lines_before_the_first_unreadable_one(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    good = [json.dumps({"step": s, "loss": 1.0 / s}) for s in (1, 2, 3)]
    path.write_text("\n".join([*good, '{"step": 4, "lo', json.dumps({"step": 5})]) + "\n")
    with caplog.at_level("WARNING"):
        log = MetricsLog(path, resume_step=10)
        log.write({"step": 4, "loss": 0.25})
        log.close()
    assert path.read_text().splitlines() == [*good, json.dumps({"step": 4, "loss": 0.25})]
    assert f"{path}: line 4 is unreadable" in caplog.text and ".unreadable-" in caplog.text
    (aside,) = tmp_path.glob("metrics.jsonl.unreadable-*")
    assert '{"step": 4, "lo' in aside.read_text()  # the damaged original is kept for inspection


def test_unreadable_round_state_json_is_set_aside_and_recomputed(tmp_path):
    from pipeline_lib.core.checkpoint import read_json_state

    state = tmp_path / "round.json"
    assert read_json_state(state) is None
    state.write_text('{"round": 1, "config_sha2')
    assert read_json_state(state) is None and not state.exists()
    assert len(list(tmp_path.glob("round.json.unreadable-*"))) == 1


def test_a_killed_verl_attempts_torn_metrics_line_does_not_wedge_collecting_the_metrics(tmp_path):
    from pipeline_lib.jobs.engines.verl.train import VerlRunError, collect_metrics
    from pipeline_lib.jobs.engines.verl.translate import metrics_log_path

    def record(step):
        return json.dumps({"step": step, "data": {"critic/score/mean": step / 10}})

    killed = tmp_path / "verl_metrics.0.jsonl"  # attempt 0 died writing step 3; attempt 1 resumed at step 3
    killed.write_text(record(1) + "\n" + record(2) + "\n" + record(3)[:20])
    metrics_log_path(tmp_path).write_text(record(3) + "\n" + record(4) + "\n")
    lines = [json.loads(line) for line in collect_metrics(tmp_path, 4).read_text().splitlines()]
    assert [(m["step"], m["critic/score/mean"]) for m in lines] == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)]
    killed.write_text(record(1) + "\n" + record(2)[:20] + "\n" + record(3) + "\n")  # damage mid-file is an error
    with pytest.raises(VerlRunError, match=r"verl_metrics\.0\.jsonl:2: not a verl file-logger record"):
        collect_metrics(tmp_path, 4)


# --- config mistakes that used to pass parse time ---------------------------------------------------------------

def _validate(config, base_dir):
    from pipeline_lib.core.config import validate_config

    from .conftest import REPO

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
    from tests.conftest import _tiny_config

    from .conftest import REPO

    assert _validate(_tiny_config(), REPO)["label"] == "tiny"  # valid, defaults filled
    sources = _validate(_with_source("gsm8k", None, None), tmp_path)["data"]["datasets"]["gsm8k"]["sources"]
    assert {"main", "demonstrations"} <= set(sources)  # the fixtures: directories with every split
    (tmp_path / "ratings.csv").write_text("item_id\n")
    ratings = _validate(_ratings(["meeting_tiny"], str(tmp_path / "ratings.csv")), tmp_path)
    assert ratings["judge"]["calibration"]["ratings"] == {"meeting_tiny": str(tmp_path / "ratings.csv")}


def test_schema_reward_names_are_the_registered_rewards():
    from pipeline_lib.core.config import load_schema
    from pipeline_lib.core.rewards import available_rewards

    from .conftest import REPO

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
    from pipeline_lib.core.config import ConfigError, load_yaml
    from pipeline_lib.plan.table import load_profile

    (tmp_path / "merge.yaml").write_text("base: &gpu {mem_mb: 100, runtime: 60}\n"
                                         "job: {<<: *gpu, runtime: 120}\n")
    assert load_yaml(tmp_path / "merge.yaml")["job"] == {"mem_mb": 100, "runtime": 120}
    (tmp_path / "merge.yaml").write_text("base: &gpu {mem_mb: 100}\njob: {<<: *gpu, runtime: 1, runtime: 2}\n")
    with pytest.raises(ConfigError, match="duplicate key 'runtime'"):
        load_yaml(tmp_path / "merge.yaml")
    assert load_profile()["set-resources"]  # the shipped profile uses merges


@pytest.mark.parametrize("content, says", [
    (None, "config file {path} does not exist"),
    ("- label: tiny\n- seed: 0\n", "must hold a mapping of keys (label:, data:, train: ...) at its top level, "
                                   "not a list"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is not UTF-8 text (byte 0 is b'\\x89')"),
    (b"seed: 0\x00\x00", "holds NUL bytes"),
    ("seed: [0, 1\n", "line 2, column 1: expected ',' or ']'"),
    ("dup: 1\ndup: 2\n", "duplicate key 'dup'"),
], ids=["missing", "list_rooted", "binary", "nul_bytes", "bad_yaml", "duplicate_key"])
def test_plan_on_a_bad_config_file_prints_a_sentence_not_a_traceback(tmp_path, content, says):
    import subprocess
    import sys

    from tests.conftest import repo_env

    from .conftest import REPO

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


# --- data rows of every kind of bad: each named by file and row -------------------------------------------------

@pytest.mark.parametrize("gold", ["NaN", "nan", "inf", "-Infinity", "1e400", "1_000"])
def test_gsm8k_non_finite_golds_are_counted_out_never_golds(tmp_path, gold):
    from pipeline_lib.core.data.build import build_real
    from tests.conftest import FIXTURES, real_spec

    main = tmp_path / "main"
    main.mkdir()
    (main / "test.jsonl").write_text((FIXTURES / "gsm8k/main/test.jsonl").read_text())
    rows = (FIXTURES / "gsm8k/main/train.jsonl").read_text().splitlines()
    rows.append(json.dumps({"question": "How many?", "answer": f"Many.\n#### {gold}"}))
    (main / "train.jsonl").write_text("\n".join(rows) + "\n")
    spec = real_spec("gsm8k")
    spec["sources"]["main"]["local"] = str(main)
    build_real("gsm8k", spec, tmp_path / "out", None)
    manifest = json.loads((tmp_path / "out/manifest.json").read_text())
    golds = [row["reward_model"]["ground_truth"] for split in ("train", "test")
             for row in pd.read_parquet(tmp_path / f"out/rl_{split}.parquet").to_dict("records")]
    assert gold not in golds and all(g.lstrip("-").replace(".", "", 1).isdigit() for g in golds), golds
    # the fixture's one word gold ("three") and this row, each counted
    assert manifest["filters"]["unparseable gold answer (no finite decimal number after ####)"] == 2, manifest


def _deepmath_file(tmp_path, rows_bytes: list[bytes], suffix=".jsonl") -> object:
    path = tmp_path / f"train{suffix}"
    path.write_bytes(b"\n".join(rows_bytes) + b"\n")
    return path


def _deepmath_rows(n=10):
    from tests.conftest import _deepmath_row

    return [json.dumps(_deepmath_row(i)).encode() for i in range(n)]


@pytest.mark.parametrize("damage, says", [
    (lambda rows: [*rows[:6], rows[6].replace(b"What", b"Wh\xe9t"), *rows[7:]],
     r"train\.jsonl, line 7: byte b'\\xe9' is not UTF-8 \(column 17\)"),
    (lambda rows: [*rows[:4], rows[4][:-2] + "é".encode()[:1]], r"train\.jsonl, line 5: a UTF-8 character cut off"),
], ids=["latin1_byte", "cut_mid_character"])
def test_jsonl_that_is_not_utf8_names_file_and_line(tmp_path, damage, says):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import _build

    path = _deepmath_file(tmp_path, damage(_deepmath_rows()))
    if "cut" in says:
        path.write_bytes(path.read_bytes().rstrip(b"\n"))  # a truncated file ends mid-character
    with pytest.raises(DataError, match=r"deepmath: .*" + says):
        _build("deepmath", path, tmp_path)


def _deepmath_csv(tmp_path, rows, encoding="utf-8"):
    import csv
    import io

    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    path = tmp_path / "train.csv"
    path.write_bytes(buffer.getvalue().encode(encoding))
    return path


def test_csv_cells_longer_than_128kb_are_read(tmp_path):
    from tests.conftest import _build, _deepmath_row, _golds

    rows = [_deepmath_row(i) for i in range(12)]
    long_solution = "A long transcript-sized solution. " * 20_000 + "\\boxed{0}"  # ~680 KB, like MeetingBank's
    rows[0]["r1_solution_1"] = long_solution
    out = _build("deepmath", _deepmath_csv(tmp_path, rows), tmp_path)
    assert len(_golds(out)) == 12
    references = {row["extra_info"]["reference"] for split in ("train", "test")
                  for row in pd.read_parquet(out / f"rl_{split}.parquet").to_dict("records")}
    assert long_solution in references  # read whole, not cut at the csv module's 128 KB default


def test_csv_in_latin1_names_file_and_line(tmp_path):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import _build, _deepmath_row

    rows = [_deepmath_row(i) for i in range(8)]
    rows[5]["topic"] = "géométrie"
    with pytest.raises(DataError, match=r"train\.csv, line 7: byte b'\\xe9' is not UTF-8"):
        _build("deepmath", _deepmath_csv(tmp_path, rows, encoding="latin-1"), tmp_path)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30], ids=["int64_max_plus_1", "int64_min_minus_1",
                                                                       "ten_to_30"])
def test_countdown_integers_beyond_int64_name_file_and_line(tmp_path, value):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import FIXTURES, _build

    main = (FIXTURES / "countdown/main/train.jsonl").read_text().splitlines()
    main.insert(6, json.dumps({"target": value, "nums": [1, 2, 4]}))
    (tmp_path / "main.jsonl").write_text("\n".join(main) + "\n")
    with pytest.raises(DataError, match=r"main\.jsonl, line 7: target must be an integer within the 64-bit range"):
        _build("countdown", tmp_path / "main.jsonl", tmp_path)


def test_deepmath_difficulty_beyond_float_range_names_file_and_line(tmp_path):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import _build, _deepmath_row

    rows = [json.dumps(_deepmath_row(i)) for i in range(10)]
    rows[3] = json.dumps(_deepmath_row(3)).replace('"difficulty": 1.0', '"difficulty": 1' + "0" * 400)
    (tmp_path / "train.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"train\.jsonl, line 4: difficulty must be a finite number"):
        _build("deepmath", tmp_path / "train.jsonl", tmp_path)


def test_a_null_in_a_parquet_integer_column_is_blamed_on_its_own_row(tmp_path):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import FIXTURES, _build

    rows = [json.loads(line) for line in (FIXTURES / "countdown/main/train.jsonl").read_text().splitlines()]
    targets = pd.array([r["target"] for r in rows], dtype="Int64")
    targets[6] = None  # row 7
    frame = pd.DataFrame({"target": targets, "nums": [r["nums"] for r in rows]})
    frame.to_parquet(tmp_path / "train.parquet", index=False)
    with pytest.raises(DataError, match=r"train\.parquet, row 7: target must be an integer, got None"):
        _build("countdown", tmp_path / "train.parquet", tmp_path)
    frame["target"] = frame["target"].fillna(7)
    frame.to_parquet(tmp_path / "train.parquet", index=False)
    _build("countdown", tmp_path / "train.parquet", tmp_path)  # the repaired file builds


# --- files outside the package that shape an output: inputs of their rule, part of the code digest --------------

def test_the_judges_code_digest_covers_its_rubric_prompts_and_the_audit_names_an_edit(tmp_path):
    import shutil
    import subprocess
    import sys

    from pipeline_lib.core.provenance import code_modules

    from .conftest import REPO

    prompts = {"config/prompts/meetingbank.txt", "config/prompts/poetry.txt"}
    assert prompts <= set(code_modules("pipeline_lib.jobs.judge.score"))
    assert not any(k.startswith("config/") for k in code_modules("pipeline_lib.core.theory.formulas"))

    root = tmp_path / "checkout"
    shutil.copytree(REPO / "pipeline_lib", root / "pipeline_lib", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "config/prompts", root / "config/prompts")
    work = tmp_path / "work"
    work.mkdir()
    script = ("from pathlib import Path\nfrom pipeline_lib.core.provenance import write_provenance\n"
              "Path('scores.jsonl').write_text('{}\\n')\n"
              "write_provenance(['scores.jsonl'], step='judge_score', entry='pipeline_lib.jobs.judge.score')\n"
              "Path('theory.csv').write_text('x\\n')\n"
              "write_provenance(['theory.csv'], step='theory', entry='pipeline_lib.core.theory.formulas')\n")
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", script], cwd=work, env=env, check=True, timeout=120)

    def audit(target):
        return subprocess.run([sys.executable, "-m", "pipeline_lib", "audit", target], cwd=work, env=env,
                              capture_output=True, text=True, timeout=120)

    assert audit("scores.jsonl").returncode == 0, audit("scores.jsonl").stdout
    prompt = root / "config/prompts/meetingbank.txt"
    prompt.write_text(prompt.read_text() + "\nBe lenient.\n")
    result = audit("scores.jsonl")
    assert result.returncode == 1 and "changed config/prompts/meetingbank.txt" in result.stdout, result.stdout
    assert audit("theory.csv").returncode == 0  # an output whose code reads no prompt is not stale


@pytest.mark.slow
def test_editing_a_rubric_prompt_plans_the_judge_again_and_nothing_upstream(tmp_path):
    """As tests/test_bad_inputs.py's code-change test: placeholder outputs whose metadata Snakemake recorded
    (``--touch``), then a dry run after an edit to the judge's rubric prompt."""
    from tests.conftest import _planned

    from .conftest import touched_workflow

    snakemake = touched_workflow(tmp_path)
    assert _planned(snakemake("-n")) == set()

    prompt = tmp_path / "config/prompts/meetingbank.txt"
    prompt.write_text(prompt.read_text() + "\nBe lenient.\n")
    jobs = _planned(snakemake("-n"))
    assert "judge_score" in jobs and not any(job.startswith(("train_", "data_", "eval_")) for job in jobs), jobs


def test_the_configs_source_roles_and_suffixes_are_the_builders_and_readers():
    from pipeline_lib.core.config import DATA_SUFFIXES, DATASET_SOURCES
    from pipeline_lib.core.data.real import BUILDERS
    from pipeline_lib.core.data.sources import _READERS
    from tests.conftest import real_spec

    assert set(DATA_SUFFIXES) == set(_READERS)
    assert set(DATASET_SOURCES) == set(BUILDERS)
    for name, roles in DATASET_SOURCES.items():  # the fixtures every builder is tested on name exactly these roles
        assert set(real_spec(name)["sources"]) == set(roles), name
