"""Bad inputs a careless user or a hostile model feeds the pipeline: each gets a clear error or a recorded
failure, never a wrong number or a job that crashes on every rerun (issue "Nothing silent")."""

from __future__ import annotations

import json
import sqlite3

import pytest

from pipeline_lib.core.rubrics import RUBRICS
from pipeline_lib.jobs.judge.parse import VerdictParseError, parse_verdict
from tests.conftest import _build, _deepmath_row, _golds, _planned, _tiny_config

POETRY = RUBRICS["poetry"]
GOOD = '{"A": 7, "B": 6, "C": 8, "D": 5, "E": 7, "F": 6, "G": 8}'
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 400, "9" * 5000]


# --- 1. judge verdicts with non-finite numbers ------------------------------------------------------------------

@pytest.mark.parametrize("number", NON_FINITE, ids=lambda n: n[:12])
def test_non_finite_verdict_scores_are_parse_errors(number):
    with pytest.raises(VerdictParseError):
        parse_verdict(GOOD.replace('"G": 8', f'"G": {number}'), POETRY.keys)


@pytest.mark.parametrize("number", NON_FINITE, ids=lambda n: n[:12])
def test_a_non_finite_verdict_falls_back_to_an_earlier_valid_one_only_as_text_order_says(number):
    # the last object with every key wins; an earlier valid one is not used to mask a bad final verdict
    with pytest.raises(VerdictParseError):
        parse_verdict(GOOD + " then " + GOOD.replace('"A": 7', f'"A": {number}'), POETRY.keys)


def test_deeply_nested_or_non_string_answers_are_parse_errors():
    with pytest.raises(VerdictParseError):
        parse_verdict("{" + '"A": ' * 1 + "[" * 100_000 + "]" * 100_000 + "}", POETRY.keys)
    with pytest.raises(VerdictParseError):
        parse_verdict(12, POETRY.keys)  # type: ignore[arg-type]  # a malformed cached response


def _judge(tmp_path, server, items):
    from pipeline_lib.core.llm_client import EndpointConfig
    from pipeline_lib.jobs.judge.llm import judge_with_llm

    endpoint = EndpointConfig.from_config({"base_url": server.base_url, "model": "judge", "backoff_s": 0.01,
                                           "concurrency": 2}, "judge")
    return judge_with_llm(POETRY, items, endpoint, tmp_path / "cache.sqlite", parse_retries=2)


def test_non_finite_verdicts_are_reasked_then_failed_and_the_cache_never_wedges_a_rerun(tmp_path):
    from .chat_server import ChatServer

    def content(body):
        poem = body["messages"][-1]["content"]
        for index, number in enumerate(NON_FINITE):
            if f"poem {index}." in poem:
                if "once" in poem and len(body["messages"]) > 1:
                    return GOOD  # the re-ask answers properly
                return "Scores: " + GOOD.replace('"B": 6', f'"B": {number}')
        return GOOD

    items = [{"POEM_TEXT": f"poem {i}. {'once' if i % 2 else 'always'}"} for i in range(len(NON_FINITE))]
    with ChatServer(content=content) as server:
        results = _judge(tmp_path, server, items)
        for index, result in enumerate(results):
            if index % 2:
                assert result["attempts"] == 2 and result["scores"]["B"] == 6
            else:
                assert "unparseable verdict" in result["failed"] and "score_100" not in result
        asked = len(server.requests)
        assert asked == sum(2 if i % 2 else 3 for i in range(len(items)))
        again = _judge(tmp_path, server, items)
        # every unparseable answer was dropped from the cache, so a failed item is asked again (3 asks); an item
        # scored at its re-ask is answered by the stored re-ask, as every parsed answer is, from the cache
        unparseable = sum(3 for r in results if "failed" in r)
        assert len(server.requests) == asked + unparseable and again == results
        asked = len(server.requests)

        # a cache written by the old code holds such responses under the first-ask key: still no wedge
        with sqlite3.connect(tmp_path / "cache.sqlite") as db:
            keys = [k for (k,) in db.execute("SELECT key FROM responses")]
            db.execute("UPDATE responses SET response = ? WHERE key = ?", ("not json {", keys[0]))
            db.execute("UPDATE responses SET response = ? WHERE key = ?", (json.dumps([1, 2]), keys[1]))
        third = _judge(tmp_path, server, items)
        # the two unreadable rows (stored re-asks) send their items back to the first ask (not kept: unparseable)
        # and then the re-ask, 2 asks each; the unparseable answers are asked as before
        assert len(server.requests) == asked + 2 * 2 + unparseable
        assert [("failed" in r) for r in third] == [("failed" in r) for r in results]


# --- 3. config values that the schema let through ---------------------------------------------------------------


@pytest.mark.parametrize("edit, key, says", [
    (lambda c: c["train"]["methods"]["softmax_exact"].update(tau=float("nan")), "train.methods.softmax_exact.tau",
     "nan"),
    (lambda c: c["theory"].update(taus=[float("inf")]), "theory.taus.0", "inf"),
    (lambda c: c["theory"].update(taus=[-float("inf")]), "theory.taus.0", "-inf"),
    (lambda c: c["theory"].update(group_size=8.0), "theory.group_size", "8.0 is not of type 'integer'"),
    (lambda c: c["theory"].update(group_size=True), "theory.group_size", "True is not of type 'integer'"),
    (lambda c: c["data"]["datasets"].update(deepmath={"sources": {"main": {"hub": "x", "local": "no/such.jsonl"}}}),
     "data.datasets.deepmath.sources.main.local", "does not exist"),
])
def test_config_rejects_non_finite_float_integers_and_missing_local_paths(tmp_path, edit, key, says):
    from pipeline_lib.core.config import ConfigError, validate_config

    from .conftest import REPO

    config = _tiny_config()
    edit(config)
    with pytest.raises(ConfigError) as excinfo:
        validate_config(config, REPO / "workflow/schemas/config.schema.yaml", base_dir=tmp_path)
    line = next((line for line in str(excinfo.value).splitlines() if f"'{key}'" in line), "")
    assert says in line, str(excinfo.value)


def test_non_finite_value_in_a_free_form_section_is_rejected():
    from pipeline_lib.core.config import ConfigError, validate_config

    from .conftest import REPO

    config = _tiny_config()
    config["data"]["datasets"]["poetry"] = {"synthesis": {"sampling": {"temperature": float("nan")}}}
    with pytest.raises(ConfigError, match=r"key 'data.datasets.poetry.synthesis.sampling.temperature': nan is not a"):
        validate_config(config, REPO / "workflow/schemas/config.schema.yaml")


def test_snakemake_dry_run_fails_at_parse_time_naming_each_key(workflow_copy):
    import subprocess
    import sys

    from tests.conftest import repo_env

    (workflow_copy / "bad.yaml").write_text(
        "label: test\ntheory: {taus: [.inf], group_size: 8.0}\n"
        "train: {methods: {softmax_exact: {advantage: softmax, tau: .nan, reward: verifier}}}\n"
        "data: {datasets: {deepmath: {enabled: true, sources: {main: {hub: zwhe99/DeepMath-103K,"
        " local: data/missing.jsonl}}}}}\n")
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "bad.yaml"], cwd=workflow_copy,
                            capture_output=True, text=True, timeout=300, env=repo_env())
    assert result.returncode != 0
    for key in ("theory.taus.0", "theory.group_size", "train.methods.softmax_exact.tau",
                "data.datasets.deepmath.sources.main.local"):
        assert f"key '{key}'" in result.stdout + result.stderr, result.stdout[-3000:]
    assert "Job stats" not in result.stdout  # nothing was planned


# --- 4. the similarity reward on huge or hostile texts ----------------------------------------------------------

def _reference_metrics(prediction: str, reference: str) -> tuple[float, float]:
    from rouge_score.rouge_scorer import RougeScorer

    from tests.conftest import official_squad_f1

    return official_squad_f1(prediction, reference), RougeScorer(["rougeL"]).score(reference, prediction)[
        "rougeL"].fmeasure


def test_similarity_is_bit_exact_with_the_references_up_to_the_cap():
    import random

    from pipeline_lib.core.rewards.similarity import SIM_MAX_CHARS, SIM_MAX_TOKENS, rouge_l_f, squad_f1

    rng = random.Random(1)
    words = ["The", "cat", "sat", "on", "a", "mat.", "dogs", "café", "42", "(yes)", "x", "NO!", "東京"]  # <= 1 token
    long = " ".join(rng.choice(words) for _ in range(SIM_MAX_TOKENS))  # at most SIM_MAX_TOKENS tokens per metric
    assert len(long) <= SIM_MAX_CHARS
    for prediction, reference in [(long, " ".join(rng.choice(words) for _ in range(200))),
                                  (" ".join(rng.choice(words) for _ in range(150)), long)]:
        f1, rouge = _reference_metrics(prediction, reference)
        assert squad_f1(prediction, reference) == f1 and rouge_l_f(prediction, reference) == rouge


def test_similarity_beyond_the_cap_counts_the_whole_text():
    """Text past a cap only lowers the score (issue 35: it was invisible; tests/rewards has the garbage cases)."""
    from pipeline_lib.core.rewards.similarity import SIM_MAX_TOKENS, rouge_l_f, squad_f1

    head = " ".join(["cat", "dog"] * (SIM_MAX_TOKENS // 2))
    reference = "cat dog bird " * 50
    for tail in ("bird " * 10_000, "bird" * 100_000):  # more tokens, or more characters, than the caps
        f1, rouge = _reference_metrics(head, reference)
        assert squad_f1(head + " " + tail, reference) < f1 and rouge_l_f(head + " " + tail, reference) < rouge


@pytest.mark.parametrize("kind", ["words", "one_token_run", "answer_tags", "closed_tags", "think"])
def test_similarity_of_a_1mb_pair_takes_milliseconds(kind):
    import random

    from pipeline_lib.core.rewards import score

    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "mat", "Hello,", "world.", "x1", "alpha"]
    text = {"words": " ".join(rng.choice(words) for _ in range(250_000)), "one_token_run": "a." * 500_000,
            "answer_tags": "<answer>" * 125_000, "closed_tags": "<answer>x</answer>" * 55_000,
            "think": "<think>" + "a b " * 250_000}[kind][:1_000_000]
    other = " ".join(rng.choice(words) for _ in range(250_000))[:1_000_000]
    best = min(_timed(lambda: score("similarity", text, other)) for _ in range(3))
    # a guard against the uncapped quadratic path (about 10 s before the cap), not a speed claim: about 3-15 ms idle,
    # up to 0.3 s seen on a loaded 2-core machine (benchmarks/rewards.py measures the speed)
    assert best < 2.0, f"{kind}: {best * 1e3:.1f} ms"


def _timed(call) -> float:
    import time

    start = time.perf_counter()
    call()
    return time.perf_counter() - start


# --- 5. outputs made with older code ----------------------------------------------------------------------------

@pytest.fixture
def package_copy(tmp_path):
    """A copy of pipeline_lib that a test may edit, with a chain raw.csv -> features.parquet -> table.tex."""
    import shutil
    import subprocess
    import sys

    from .conftest import REPO

    root = tmp_path / "checkout"
    shutil.copytree(REPO / "pipeline_lib", root / "pipeline_lib", ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "raw.csv").write_text("x\n1\n")
    script = (
        "from pathlib import Path\n"
        "import pandas as pd\n"
        "from pipeline_lib.core.provenance import write_provenance\n"
        "pd.DataFrame({'x': [1]}).to_parquet('features.parquet')\n"
        "write_provenance(['features.parquet'], step='features', inputs=['raw.csv'],"
        " entry='pipeline_lib.core.theory.formulas')\n"
        "Path('table.tex').write_text('table')\n"
        "write_provenance(['table.tex'], step='table', inputs=['features.parquet'])\n"  # whole-package digest
    )
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", script], cwd=work, env=env, check=True, timeout=120)

    def audit() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipeline_lib", "audit", "table.tex"], cwd=work, env=env,
                              capture_output=True, text=True, timeout=120)

    return root / "pipeline_lib", work, audit


def test_audit_flags_outputs_made_with_older_code(package_copy):
    package, _work, audit = package_copy
    assert audit().returncode == 0, audit().stdout
    with open(package / "core" / "theory" / "formulas.py", "a") as handle:
        handle.write("\nEDITED = True\n")
    result = audit()
    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if "made with older code" in line]
    # both steps imported theory/formulas.py: the features step (its entry) and the table (whole package)
    changed = "changed pipeline_lib/core/theory/formulas.py"
    assert len(problems) == 2 and all(changed in line for line in problems), result.stdout


def test_audit_flags_an_untracked_new_module(package_copy):
    package, _work, audit = package_copy
    (package / "helpers_new.py").write_text("VALUE = 1\n")
    result = audit()
    assert result.returncode == 1 and "new pipeline_lib/helpers_new.py" in result.stdout, result.stdout
    # only the whole-package step is stale: pipeline_lib.core.theory.formulas does not import the new module
    assert sum("made with older code" in line for line in result.stdout.splitlines()) == 1


def test_audit_flags_a_deleted_sidecar_of_an_intermediate_output(package_copy):
    _package, work, audit = package_copy
    (work / "features.parquet.prov.json").unlink()
    result = audit()
    assert result.returncode == 1
    assert "features.parquet: no provenance sidecar" in result.stdout and "deleted since" in result.stdout
    assert "raw.csv" not in result.stdout  # its chain is cut at the deleted sidecar; raw.csv stays a raw input


def test_code_digest_follows_imports_and_is_cached_per_process():
    import time

    from pipeline_lib.core.provenance import code_digest, code_modules

    judge, trainer = code_modules("pipeline_lib.jobs.judge.score"), code_modules("pipeline_lib.jobs.engines.local.rl")
    assert "pipeline_lib/jobs/judge/parse.py" in judge and "pipeline_lib/jobs/judge/parse.py" not in trainer
    assert "pipeline_lib/jobs/engines/local/rl.py" in trainer and "pipeline_lib/jobs/engines/local/rl.py" not in judge
    assert "pipeline_lib/core/rl/losses.py" in trainer and "pipeline_lib/__init__.py" in trainer
    code_digest("pipeline_lib.jobs.engines.verl.train")
    start = time.perf_counter()
    for _ in range(20):
        code_digest("pipeline_lib.jobs.engines.verl.train")
    assert (time.perf_counter() - start) / 20 < 0.05  # cached: a Snakefile calls it once per rule
    with pytest.raises(ValueError, match="not a module"):
        code_digest("pipeline_lib.no_such_module")


def _planned_outputs(result) -> list[str]:
    """Output paths of every job of a dry run (one training rule runs every method, so rules alone say too little)."""
    return [path for line in result.stdout.splitlines() if line.strip().startswith("output:")
            for path in line.split(":", 1)[1].replace(",", " ").split()]


@pytest.mark.slow
def test_snakemake_reruns_exactly_the_jobs_whose_code_changed(tmp_path):
    """A results tree whose metadata Snakemake recorded (``--touch`` over placeholder outputs, no real run), then
    dry runs with the default rerun triggers after an edit to the judge and to the RL trainer."""
    from .conftest import touched_workflow

    snakemake = touched_workflow(tmp_path, full_console=True)
    assert _planned(snakemake("-n")) == set()

    judge = tmp_path / "pipeline_lib/jobs/judge/parse.py"
    original = judge.read_text()
    judge.write_text(original + "\n# a change to the judge\n")
    jobs = _planned(snakemake("-n"))
    assert "judge_score" in jobs and not any(job.startswith(("train_", "data_", "eval_")) for job in jobs), jobs
    judge.write_text(original)
    assert _planned(snakemake("-n")) == set()

    trainer = tmp_path / "pipeline_lib/jobs/engines/local/rl.py"
    trainer.write_text(trainer.read_text() + "\n# a change to the RL trainer\n")
    result = snakemake("-n")
    jobs, outputs = _planned(result), _planned_outputs(result)
    assert {"train_local", "train_local_group", "eval_checkpoints_countdown_tiny_seed0", "judge_score",
            "paper_table1"} <= jobs, jobs
    assert not jobs & {"data_tiny", "data_tokenizer", "paper_theory"}, jobs
    trained = {path.split("/")[3] for path in outputs if path.startswith("results/train/")}
    assert {"grpo_exact", "softmax_exact", "softmax_tau0p1_m4"} <= trained, trained
    assert not trained & {"sft", "base", "opd_teacher"}, trained


# --- 2. local dataset files: no type guessing, errors name the file and its line --------------------------------


def _write_jsonl(path, rows, blank_lines_at=()):
    lines = []
    for index, row in enumerate(rows):
        if index in blank_lines_at:
            lines.append("")
        lines.append(row if isinstance(row, str) else json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("missing", [{"final_answer": None}, "drop"], ids=["null", "absent"])
def test_deepmath_row_without_final_answer_is_an_error_naming_file_and_line(tmp_path, missing):
    from pipeline_lib.core.data.schema import DataError

    rows = [_deepmath_row(i) for i in range(12)]
    # three duplicates first, so a row count after de-duplication would differ from the file line
    rows[1:1] = [_deepmath_row(0), _deepmath_row(0), _deepmath_row(0)]
    bad = _deepmath_row(99)
    if missing == "drop":
        del bad["final_answer"]
    else:
        bad |= missing
    rows.insert(9, bad)
    source = _write_jsonl(tmp_path / "train.jsonl", rows, blank_lines_at=(5,))  # a blank line before it, too
    with pytest.raises(DataError, match=r"deepmath: .*train\.jsonl, line 11: column 'final_answer' must be a "
                                        r"non-empty string, got None"):
        _build("deepmath", source, tmp_path)


def test_deepmath_golds_are_read_as_written(tmp_path):
    rows = [_deepmath_row(i) for i in range(16)]
    rows[0]["final_answer"] = "007"
    rows[1]["final_answer"] = 123456789012345678901234567890  # a JSON integer: exact, never 1.2345678901234568e+29
    rows[2]["final_answer"] = "123456789012345678901234567890"
    rows[3]["final_answer"] = 5  # another row's gold of another JSON type
    golds = _golds(_build("deepmath", _write_jsonl(tmp_path / "train.jsonl", rows), tmp_path))
    assert golds["What is 0 + 0?"] == "007"
    assert golds["What is 1 + 1?"] == golds["What is 2 + 2?"] == "123456789012345678901234567890"
    assert golds["What is 3 + 3?"] == "5"


@pytest.mark.parametrize("value", [7.5, 1e29, True, [1]], ids=["float", "float_big", "bool", "list"])
def test_deepmath_gold_of_another_type_is_an_error(tmp_path, value):
    from pipeline_lib.core.data.schema import DataError

    rows = [_deepmath_row(i) for i in range(10)]
    rows[4]["final_answer"] = value
    with pytest.raises(DataError, match=r"train\.jsonl, line 5: column 'final_answer'"):
        _build("deepmath", _write_jsonl(tmp_path / "train.jsonl", rows), tmp_path)


def test_csv_is_read_without_type_guessing(tmp_path):
    import csv

    from pipeline_lib.core.data.schema import DataError

    rows = [_deepmath_row(i) for i in range(16)]
    rows[0]["final_answer"] = "007"
    rows[1]["final_answer"] = "123456789012345678901234567890"
    rows[2]["question"] = "A question\nover two lines?"  # a quoted multi-line cell: later rows start a line later
    path = tmp_path / "train.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    golds = _golds(_build("deepmath", path, tmp_path))
    assert golds["What is 0 + 0?"] == "007" and golds["What is 1 + 1?"] == "123456789012345678901234567890"
    rows[6]["final_answer"] = ""  # an empty cell: a missing gold (file line 1 header + 6 rows + 1 extra line)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(DataError, match=r"train\.csv, line 9: column 'final_answer' must be a non-empty string"):
        _build("deepmath", path, tmp_path)


COUNTDOWN_BAD = [
    ({"target": 7.9, "nums": [1, 2, 4]}, r"target must be an integer, got 7\.9"),
    ({"target": 7.0, "nums": [1, 2, 4]}, r"target must be an integer, got 7\.0"),
    ({"target": "7", "nums": [1, 2, 4]}, r"target must be an integer, got '7'"),
    ({"target": None, "nums": [1, 2, 4]}, r"target must be an integer, got None"),
    ({"target": True, "nums": [1, 2, 4]}, r"target must be an integer, got True"),
    ({"nums": [1, 2, 4]}, r"target must be an integer, got None"),
    ({"target": 7, "nums": ["a", 2, 4]}, r"every entry of nums must be an integer, got 'a'"),
    ({"target": 7, "nums": [1.5, 2, 4]}, r"every entry of nums must be an integer, got 1\.5"),
    ({"target": 7, "nums": 124}, r"nums must be a list of integers, got 124"),
    ({"target": 7, "nums": "1 2 4"}, r"nums must be a list of integers, got '1 2 4'"),
    ({"target": 7, "nums": [1, 2]}, r"expected 3-4 numbers, got \[1, 2\]"),
]


@pytest.mark.parametrize("row, message", COUNTDOWN_BAD, ids=[str(i) for i in range(len(COUNTDOWN_BAD))])
def test_bad_countdown_task_is_an_error_naming_file_and_line(tmp_path, row, message):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import FIXTURES

    main = (FIXTURES / "countdown/main/train.jsonl").read_text().splitlines()
    main.insert(6, json.dumps(row))
    (tmp_path / "main.jsonl").write_text("\n".join(main) + "\n")
    with pytest.raises(DataError, match=r"countdown: .*main\.jsonl, line 7: " + message):
        _build("countdown", tmp_path / "main.jsonl", tmp_path)


@pytest.mark.parametrize("row, message", COUNTDOWN_BAD[:3], ids=["float", "float_integral", "string"])
def test_bad_countdown_gold_task_is_an_error_naming_file_and_line(tmp_path, row, message):
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import FIXTURES

    gold = (FIXTURES / "countdown/gold/train.jsonl").read_text().splitlines()
    gold[2] = json.dumps(json.loads(gold[2]) | row)
    (tmp_path / "gold.jsonl").write_text("\n".join(gold) + "\n")
    with pytest.raises(DataError, match=r"countdown: .*gold\.jsonl, line 3: " + message):
        _build("countdown", FIXTURES / "countdown/main", tmp_path, gold=tmp_path / "gold.jsonl")


@pytest.mark.parametrize("truth", ['{"numbers": [1, 2, 3], "target": 6.5}', '{"numbers": [1, 2.0, 3], "target": 6}',
                                   '{"numbers": "123", "target": 6}', {"numbers": [1, 2, 3], "target": True}])
def test_countdown_ground_truth_is_never_truncated_at_scoring(truth):
    """Not scored as if 6.5 were 6: unscorable, 0 (a reward never raises for one item; the data stage rejects it)."""
    from pipeline_lib.core.rewards import score

    result = score("countdown", "<answer>1 + 2 + 3</answer>", truth)
    assert (result["score"], result["unscorable"]) == (0.0, 1.0)


def test_bad_jsonl_lines_name_file_and_line(tmp_path):
    from pipeline_lib.core.data.schema import DataError

    rows = [json.dumps(_deepmath_row(i)) for i in range(5)]
    for bad, message in (("{not json", "line 3: not valid JSON"), ("[1, 2]", "line 3: expected a JSON object")):
        source = _write_jsonl(tmp_path / "train.jsonl", [*rows[:2], bad, *rows[2:]])
        with pytest.raises(DataError, match=message):
            _build("deepmath", source, tmp_path)


def _out_files(out):
    return sorted(p.name for p in out.iterdir()) if out.exists() else []


def test_failed_python_m_build_leaves_no_partial_outputs(tmp_path):
    import subprocess
    import sys

    from tests.conftest import real_spec, repo_env

    rows = [_deepmath_row(i) for i in range(30)]
    source = _write_jsonl(tmp_path / "train.jsonl", rows)
    spec = real_spec("deepmath", holdout_fraction=0.5)
    spec["sources"]["main"]["local"] = str(source)
    out = tmp_path / "results/data/deepmath"
    (out / "synthesis.sqlite").parent.mkdir(parents=True)
    (out / "synthesis.sqlite").write_text("a cache is kept")

    def build() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipeline_lib.core.data.build", "real", "--dataset", "deepmath",
                               "--spec", json.dumps(spec), "--out-dir", str(out)], capture_output=True, text=True,
                              timeout=300, env=repo_env() | {"OMP_NUM_THREADS": "1"})

    assert build().returncode == 0
    assert "rl_train.parquet.prov.json" in _out_files(out) and "manifest.json" in _out_files(out)
    rows[25]["final_answer"] = None  # the bad row is late: some splits are written before it is reached
    _write_jsonl(source, rows)
    result = build()
    assert result.returncode != 0 and f"{source}, line 26: column 'final_answer'" in result.stderr
    assert _out_files(out) == ["synthesis.sqlite"], result.stderr[-2000:]


@pytest.mark.slow
def test_failed_snakemake_build_leaves_no_partial_outputs(workflow_copy):
    import subprocess
    import sys

    import yaml

    from tests.conftest import repo_env

    rows = [_deepmath_row(i) for i in range(30)]
    source = _write_jsonl(workflow_copy / "deepmath.jsonl", rows)
    config = _tiny_config()  # the tiny default with one real dataset built
    config["data"]["datasets"]["deepmath"] = {"enabled": True, "holdout_fraction": 0.5, "sources": {
        "main": {"hub": "zwhe99/DeepMath-103K", "local": "deepmath.jsonl"}}}
    (workflow_copy / "data.yaml").write_text(yaml.safe_dump(config))

    def snakemake(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "snakemake", "results/data/deepmath/manifest.json", "--cores",
                               "1", "--configfile", "data.yaml", *args], cwd=workflow_copy, capture_output=True,
                              text=True, timeout=600, env=repo_env() | {"OMP_NUM_THREADS": "1"})

    assert snakemake().returncode == 0
    out = workflow_copy / "results/data/deepmath"
    assert "rl_test.parquet.prov.json" in _out_files(out)
    rows[25]["final_answer"] = None
    _write_jsonl(source, rows)
    result = snakemake("--forcerun", "data_build")
    assert result.returncode != 0
    log = (workflow_copy / "logs/data_build/deepmath.log").read_text()
    assert "deepmath.jsonl, line 26: column 'final_answer' must be a non-empty string" in log
    assert _out_files(out) == [], _out_files(out)


@pytest.mark.parametrize("name, role, relative, line, field, expected", [
    ("gsm8k", "demonstrations", "gsm8k/cot/train.jsonl", 2, "final_answer", "column 'final_answer'"),
    ("gsm8k", "main", "gsm8k/main/train.jsonl", 3, "answer", "column 'answer'"),
    ("meetingbank", "main", "meetingbank/train.jsonl", 4, "summary", "column 'summary'"),
    ("openthoughts", "main", "openthoughts/train.jsonl", 2, "conversations", "conversations must be a list"),
    ("openthoughts", "main", "openthoughts/train.jsonl", 3, "domain", "column 'domain' must be a string"),
])
def test_missing_or_mistyped_field_in_other_datasets_names_file_and_line(tmp_path, name, role, relative, line,
                                                                         field, expected):
    import shutil

    from pipeline_lib.core.data.build import build_real
    from pipeline_lib.core.data.schema import DataError
    from tests.conftest import FIXTURES, real_spec

    spec = real_spec(name)
    source = FIXTURES / relative
    copy = tmp_path / "src" / relative
    shutil.copytree(source.parent, copy.parent)
    rows = copy.read_text().splitlines()
    record = json.loads(rows[line - 1])
    record[field] = 12 if field in ("domain", "conversations") else None
    rows[line - 1] = json.dumps(record)
    copy.write_text("\n".join(rows) + "\n")
    local = spec["sources"][role]["local"]
    spec["sources"][role]["local"] = str(copy if local.endswith(".jsonl") else copy.parent)
    with pytest.raises(DataError, match=rf"{name}: .*{copy.name}, line {line}: .*{expected}"):
        build_real(name, spec, tmp_path / "out", None)
