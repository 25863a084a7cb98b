"""The judge stage end to end: scoring runs (programmatic and LLM, served or external), cross-judge
agreement, the blind calibration export, the rating page in a real headless browser, and the import."""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from pipeline_lib.core.rubrics import RUBRICS
from pipeline_lib.jobs.judge import calibration, cross, score
from pipeline_lib.jobs.judge.serve import free_port
from pipeline_lib.paper.results import runs_record
from tests.chat_server import ChatServer, meetingbank_verdict
from tests.conftest import runs_written

MEETING = RUBRICS["meetingbank"]
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def meeting_data(tmp_path_factory) -> Path:
    from pipeline_lib.core.data.tiny import generate_task

    spec = {"n_train": 2, "n_test": 12, "imperfect_fraction": 0.0, "numbers_per_task": [3], "max_number": 9,
            "max_target": 100}
    path = tmp_path_factory.mktemp("data") / "rl_test.parquet"
    pd.DataFrame(generate_task("meeting_tiny", spec, 0)["rl_test"]).to_parquet(path)
    return path


def write_generations(path: Path, data: Path, quality: str) -> Path:
    """Eval-style generations: the reference (good), the first half of it (cut) or a vague line (bad)."""
    frame = pd.read_parquet(data)
    lines = []
    for index, extra in enumerate(frame["extra_info"]):
        reference = extra["reference"]
        text = {"good": reference, "cut": " ".join(reference.split()[: len(reference.split()) // 2]),
                "bad": "The council met."}[quality]
        lines.append({"prompt_index": index, "mode": "greedy", "sample": 0, "text": f"<think>ok</think>{text}",
                      "length": 10, "score": 0.0})
        lines.append({"prompt_index": index, "mode": "sample", "sample": 0, "text": "ignored", "length": 1,
                      "score": 0.0})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def run_score(tmp_path: Path, data: Path, judge: dict, judge_name: str, method: str, quality: str) -> Path:
    generations = write_generations(tmp_path / "eval" / method / "generations.jsonl", data, quality)
    out = tmp_path / "judge" / judge_name / "meeting_tiny" / method / "seed0"
    assert score.main(["--judge", json.dumps(judge), "--rubric", "meetingbank", "--generations", str(generations),
                       "--data", str(data), "--cache", str(tmp_path / f"{judge_name}.sqlite"),
                       "--out", str(out)]) == 0
    return out / "summary.json"


PROGRAMMATIC = {"kind": "programmatic", "label": "strict", "weighting": "strict"}
LENIENT = {"kind": "programmatic", "label": "overlap", "basis": "overlap"}


def test_programmatic_scoring_orders_methods_and_judges_only_the_answer(tmp_path, meeting_data):
    summaries = {q: run_score(tmp_path, meeting_data, PROGRAMMATIC, "primary", q, q) for q in ("good", "cut", "bad")}
    means = {q: json.loads(p.read_text())["score_100"] for q, p in summaries.items()}
    assert means["good"] > means["cut"] > means["bad"]
    lines = [json.loads(x) for x in summaries["good"].with_name("scores.jsonl").read_text().splitlines()]
    assert len(lines) == 12 and all("<think>" not in line["response"] for line in lines)  # greedy only, think cut
    assert json.loads(summaries["good"].read_text())["judge"] == {"kind": "programmatic", "label": "strict",
                                                                  "basis": "facts", "weighting": "strict"}
    assert Path(str(summaries["good"]) + ".prov.json").exists()


def test_programmatic_judge_refuses_rows_without_facts(tmp_path, meeting_data):
    frame = pd.read_parquet(meeting_data)
    frame["extra_info"] = [{k: v for k, v in e.items() if k != "facts"} for e in frame["extra_info"]]
    stripped = tmp_path / "nofacts.parquet"
    frame.to_parquet(stripped)
    with pytest.raises(ValueError, match="no structured 'facts'"):
        run_score(tmp_path, stripped, PROGRAMMATIC, "primary", "sft", "good")


def test_llm_judge_served_for_the_job_then_stopped(tmp_path, meeting_data, caplog):
    """`serve.command` starts a server (here the test chat server standing in for `vllm serve`) on a free port, the
    job waits for /health, scores through it, and the server is gone afterwards; a rerun hits the cache only."""
    import logging
    import re

    caplog.set_level(logging.INFO, logger="pipeline_lib.jobs.judge.serve")
    judge = {"kind": "llm", "label": "served", "parse_retries": 1,
             "endpoint": {"model": "judge", "concurrency": 4, "backoff_s": 0.01},
             "serve": {"command": [sys.executable, str(REPO / "tests" / "chat_server.py"), "--port", "{port}"],
                       "startup_timeout_s": 60}}
    summary = json.loads(run_score(tmp_path, meeting_data, judge, "primary", "good", "good").read_text())
    assert summary["scored"] == 12 and summary["failed"] == 0 and summary["judge"]["served"] is True
    port = int(re.search(r"healthy at http://127\.0\.0\.1:(\d+)/health", caplog.text).group(1))
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()  # the server was stopped
    assert list(summary["verdicts_by"].values()) == [{"endpoint": {"served": judge["serve"]["command"],
                                                                   "model": "judge", "revision": None,
                                                                   "sampling": {}}, "verdicts": 12, "cached": 0}]
    # the same served judge again (another free port): every verdict from the cache, and the summary says whose
    rerun = json.loads(run_score(tmp_path, meeting_data, judge, "primary", "good", "good").read_text())
    assert [(v["verdicts"], v["cached"]) for v in rerun["verdicts_by"].values()] == [(12, 12)]
    # the same model name at an external endpoint is another judge (issue 60): asked again, never the served one's
    with ChatServer(content=meetingbank_verdict) as server:
        judge = judge | {"serve": {}, "endpoint": judge["endpoint"] | {"base_url": server.base_url}}
        again = json.loads(run_score(tmp_path, meeting_data, judge, "primary", "good", "good").read_text())
        assert len(server.requests) == 12
    assert again["score_100"] == summary["score_100"]
    ((by, stated),) = again["verdicts_by"].items()
    assert stated["endpoint"]["base_url"] == server.base_url.rstrip("/") and stated["cached"] == 0
    lines = [json.loads(x) for x in (tmp_path / "judge/primary/meeting_tiny/good/seed0/scores.jsonl").read_text()
             .splitlines()]
    assert {line["answered_by"] for line in lines} == {by}


def test_a_judge_job_whose_items_are_all_cached_starts_no_server(tmp_path, meeting_data, monkeypatch):
    """The cache is read before `serve.command` runs: a rerun with every answer cached succeeds without starting the
    server (the command is the same: it is part of the cache key, issue 60), and starts nothing; a job with an
    uncached item starts it. (Before issue 60 the rerun's command was one that fails if started; another command is
    now another judge, asked again.)"""
    from pipeline_lib.jobs.judge.serve import ServerStartError

    served = {"kind": "llm", "label": "served", "parse_retries": 1,
              "endpoint": {"model": "judge", "concurrency": 4, "backoff_s": 0.01},
              "serve": {"command": [sys.executable, str(REPO / "tests" / "chat_server.py"), "--port", "{port}"],
                        "startup_timeout_s": 60}}
    first = json.loads(run_score(tmp_path, meeting_data, served, "primary", "good", "good").read_text())
    started = []

    def never(*args, **kwargs):
        started.append(args)
        raise ServerStartError("judge server exited with status 9 before becoming healthy")

    monkeypatch.setattr(score, "served_endpoint", never)
    again = json.loads(run_score(tmp_path, meeting_data, served, "primary", "good", "good").read_text())
    assert not started and again["scored"] == 12 and again["score_100"] == first["score_100"]
    assert [(v["verdicts"], v["cached"]) for v in again["verdicts_by"].values()] == [(12, 12)]
    with pytest.raises(ServerStartError, match="exited with status 9"):  # other responses: not cached
        run_score(tmp_path, meeting_data, served, "primary", "cut", "cut")
    assert started
    other = served | {"serve": {**served["serve"], "command": [*served["serve"]["command"], "--latency", "0"]}}
    started.clear()
    with pytest.raises(ServerStartError):  # another served command is another judge: asked, never the cached
        run_score(tmp_path, meeting_data, other, "primary", "good", "good")
    assert started


def test_served_judge_that_dies_is_a_clear_error(tmp_path, meeting_data):
    judge = {"kind": "llm", "label": "broken", "endpoint": {"model": "judge"},
             "serve": {"command": [sys.executable, "-c", "raise SystemExit(3)"],
                       "startup_timeout_s": 30}}
    from pipeline_lib.jobs.judge.serve import ServerStartError

    with pytest.raises(ServerStartError, match="exited with status 3"):
        run_score(tmp_path, meeting_data, judge, "primary", "sft", "good")


@pytest.mark.parametrize("mode", ["response_format", "structured_outputs", "guided_json"])
def test_structured_output_is_requested_when_configured(tmp_path, meeting_data, mode):
    def answer(request):  # a schema-constrained server answers the object alone
        verdict = meetingbank_verdict(request)
        return verdict[verdict.index("{"):verdict.rindex("}") + 1]

    with ChatServer(content=answer) as server:
        judge = {"kind": "llm", "label": "structured",
                 "endpoint": {"base_url": server.base_url, "model": "judge", "structured_output": mode}}
        summary = json.loads(run_score(tmp_path, meeting_data, judge, "primary", "sft", "good").read_text())
        body = server.requests[0]
    schema = {"response_format": lambda: body["response_format"]["json_schema"]["schema"],
              "structured_outputs": lambda: body["structured_outputs"]["json"],
              "guided_json": lambda: body["guided_json"]}[mode]()
    assert schema["required"] == list(MEETING.keys)
    assert schema["properties"]["factuality"] == {"type": "integer", "minimum": 1, "maximum": 10}
    assert summary["scored"] == 12


def test_a_judge_job_whose_items_fail_exits_1_unless_max_failed_fraction_allows(tmp_path, meeting_data):
    generations = write_generations(tmp_path / "eval" / "sft" / "generations.jsonl", meeting_data, "good")
    out = tmp_path / "out"
    with ChatServer(content=meetingbank_verdict, failures=[503] * 100) as server:  # 503 to everything
        judge = {"kind": "llm", "label": "down", "endpoint": {"base_url": server.base_url, "model": "judge",
                                                               "max_retries": 1, "backoff_s": 0.01}}
        assert score.main(["--judge", json.dumps(judge), "--rubric", "meetingbank", "--generations",
                           str(generations), "--data", str(meeting_data), "--cache", str(tmp_path / "c.sqlite"),
                           "--out", str(out)]) == 1
    assert not (out / "summary.json").exists() and not (out / "scores.jsonl").exists()


def test_a_duplicated_generations_line_is_refused_naming_the_lines(tmp_path, meeting_data):
    generations = write_generations(tmp_path / "generations.jsonl", meeting_data, "good")
    lines = generations.read_text().splitlines(keepends=True)
    generations.write_text("".join([*lines, lines[0]]))
    with pytest.raises(ValueError, match=rf"generations.jsonl:{len(lines) + 1}: prompt_index 0 .*at line 1"):
        score.load_items(generations, meeting_data)


def test_timeouts_are_retried_then_recorded_as_failures(tmp_path, meeting_data):
    with ChatServer(content=meetingbank_verdict, latency_s=3.0) as server:
        judge = {"kind": "llm", "label": "slow", "parse_retries": 0, "max_failed_fraction": 1.0,
                 "endpoint": {"base_url": server.base_url, "model": "judge", "timeout_s": 0.5, "max_retries": 1,
                              "backoff_s": 0.01, "concurrency": 4, "breaker_failures": 100}}  # per-item failures
        summary = json.loads(run_score(tmp_path, meeting_data, judge, "primary", "sft", "good").read_text())
        assert len(server.requests) == 24  # every item asked twice (one retry), then given up
    assert summary["scored"] == 0 and summary["failed"] == 12 and summary["score_100"] is None
    lines = [json.loads(x) for x in (tmp_path / "judge/primary/meeting_tiny/sft/seed0/scores.jsonl").open()]
    assert all(line["failed"].startswith("TimeoutError: no complete answer within timeout_s") for line in lines)


def test_server_killed_mid_run_then_restarted_loses_and_duplicates_nothing(tmp_path):
    from pipeline_lib.core.llm_client import EndpointConfig, ResponseCache
    from pipeline_lib.jobs.judge.llm import judge_with_llm

    items = [{"MEETING_TITLE": "", "TRANSCRIPT_TEXT": f"segment {i}", "SUMMARY_TEXT": "word " * (i % 30)}
             for i in range(40)]
    port = free_port()
    endpoint = EndpointConfig.from_config({"base_url": f"http://127.0.0.1:{port}/v1", "model": "judge",
                                           "concurrency": 4, "max_retries": 8, "backoff_s": 0.2}, "judge")
    first = ChatServer(content=meetingbank_verdict, latency_s=0.05, port=port).__enter__()
    results: list = []
    worker = threading.Thread(target=lambda: results.extend(
        judge_with_llm(MEETING, items, endpoint, tmp_path / "cache.sqlite")))
    worker.start()
    while len(first.requests) < 12:
        time.sleep(0.01)
    first.__exit__()  # the server dies with requests in flight
    time.sleep(0.5)
    second = ChatServer(content=meetingbank_verdict, latency_s=0.05, port=port).__enter__()
    worker.join(timeout=120)
    second.__exit__()
    assert len(results) == 40 and all("score_100" in r for r in results)
    for item, result in zip(items, results, strict=True):  # each score belongs to its own item
        expected = 1 + min(9, len(item["SUMMARY_TEXT"].split()) // 4)
        assert set(result["scores"].values()) == {expected}
    assert len(ResponseCache(tmp_path / "cache.sqlite")) == 40
    assert len(first.requests) + len(second.requests) >= 40


def test_cross_judge_rank_correlation_and_offset(tmp_path, meeting_data):
    methods = ["bad", "cut", "good"]
    primary = [run_score(tmp_path, meeting_data, PROGRAMMATIC, "primary", m, m) for m in methods]
    second = [run_score(tmp_path, meeting_data, LENIENT, "second", m, m) for m in methods]
    result = cross.cross_judge(runs_written(primary), runs_written(second), methods)
    rows = {r["method"]: r for r in result["methods"]}
    assert result["spearman_methods"] == pytest.approx(1.0)  # both judges order bad < cut < good
    assert result["offset_mean"] == pytest.approx(sum(r["primary"] - r["second"] for r in rows.values()) / 3)
    assert result["items_compared"] == 36
    assert cross.rank_correlation([1, 2], [2, 1])[0] is None
    assert cross.rank_correlation([1, 1, 1], [1, 2, 3])[1].startswith("undefined")
    with pytest.raises(ValueError, match=r"\['missing'\]"):
        cross.cross_judge(runs_written(primary), runs_written(second), [*methods, "missing"])


@pytest.fixture
def exported(tmp_path, meeting_data):
    methods = ["bad", "cut", "good"]
    summaries = [run_score(tmp_path, meeting_data, PROGRAMMATIC, "primary", m, m) for m in methods]
    scores = runs_written([s.with_name("scores.jsonl") for s in summaries])
    out = tmp_path / "calibration"
    calibration.export_calibration("meeting_tiny", MEETING, scores, meeting_data, 30, 7, out)
    return out, scores


def test_calibration_export_is_blind_balanced_and_stable(exported, meeting_data, tmp_path):
    out, scores = exported
    key = list(csv.DictReader((out / "key" / "key.csv").open()))
    assert len(key) == 30 and {m: sum(r["method"] == m for r in key) for m in ("bad", "cut", "good")} == \
        {"bad": 10, "cut": 10, "good": 10}
    sheet = (out / "items.csv").read_text()
    page = (out / "rate.html").read_text()
    for method in ("bad", "cut", "good"):  # the rater sees no method name or run path
        assert f"/{method}/" not in sheet + page and f",{method}," not in sheet
    assert next(iter(csv.reader((out / "items.csv").open()))) == ["item_id", "context", "response"]
    again = tmp_path / "again"
    calibration.export_calibration("meeting_tiny", MEETING, scores, meeting_data, 30, 7, again)
    assert (again / "key" / "key.csv").read_text() == (out / "key" / "key.csv").read_text()
    with pytest.raises(ValueError, match="only 36 judged outputs"):
        calibration.export_calibration("meeting_tiny", MEETING, scores, meeting_data, 40, 7, tmp_path / "x")


def test_no_ratings_file_is_reported_not_invented(exported):
    out, scores = exported
    result = calibration.agreement(out / "missing.csv", out / "key" / "key.csv", scores, MEETING)
    assert result["status"] == "no ratings" and "pearson" not in result


def write_ratings(path: Path, rows: list[list]) -> Path:
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows([["item_id", *MEETING.keys], *rows])
    return path


def test_ratings_import_computes_correlations_and_rejects_bad_cells(exported, tmp_path):
    out, scores = exported
    key = list(csv.DictReader((out / "key" / "key.csv").open()))
    level = {"bad": 2, "cut": 5, "good": 9}
    rows = [[r["item_id"], *([level[r["method"]]] * 5)] for r in key]
    result = calibration.agreement(write_ratings(tmp_path / "r.csv", rows), out / "key" / "key.csv", scores, MEETING)
    judged = {}
    for path, run in scores.items():
        for line in Path(path).read_text().splitlines():
            record = json.loads(line)
            judged[(run.name, record["prompt_index"])] = record["score_100"]
    human = [10 * level[r["method"]] for r in sorted(key, key=lambda r: r["item_id"])]
    judge = [judged[(r["method"], int(r["prompt_index"]))] for r in sorted(key, key=lambda r: r["item_id"])]
    assert result["items_compared"] == 30
    assert result["pearson"] == pytest.approx(stats.pearsonr(human, judge).statistic)
    assert result["spearman"] > 0.5
    bad_cases = [([[key[0]["item_id"], 11, 5, 5, 5, 5]], "outside 1-10"),
                 ([["item-999", 5, 5, 5, 5, 5]], "unknown item_id 'item-999'"),
                 ([[key[0]["item_id"], "x", 5, 5, 5, 5]], "informativeness='x' is not an integer"),
                 ([[key[0]["item_id"], *[5] * 5], [key[0]["item_id"], *[5] * 5]], "rated twice")]
    for rows, message in bad_cases:
        with pytest.raises(calibration.RatingsError, match=message):
            calibration.agreement(write_ratings(tmp_path / "bad.csv", rows), out / "key" / "key.csv", scores, MEETING)


def browser_available() -> bool:
    return bool(shutil.which("chromium") and shutil.which("chromedriver"))


needs_browser = pytest.mark.skipif(not browser_available() and not os.environ.get("PIPELINE_REQUIRE_BROWSER"),
                                   reason="Debian chromium + chromium-driver not installed (CI installs them)")


def chromium(downloads: Path):
    """Headless Chromium (Debian's chromium + chromedriver) saving downloads to ``downloads``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    downloads.mkdir(exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    return driver


#: Generations written to end, comment out or break the page's script, or to run in a spreadsheet (issue 45). No
#: `-->`: it would close the `<!--` of another item and hide what `<!--<script>` does to a page that embeds markup.
HOSTILE = ["</script><script>document.body.dataset.pwned = 'script'</script>", "<!--<script>", "<!--",
           "<script>", "</SCRIPT >", "]]></script><![CDATA[", "a\u2028line\u2029separator",
           "<img src=x onerror=\"document.body.dataset.pwned = 'img'\">", "&lt;b&gt; &amp; <b>bold</b>",
           "\\u003c/script\\u003e as typed", "=HYPERLINK(\"http://127.0.0.1/\", \"click\")", "+1+1",
           "-2+3+cmd|' /C calc'!A0", "@SUM(1, 2)", "\tTAB=1", "\rCR=1", "'quoted", "-3"]


@needs_browser
def test_rating_page_shows_hostile_generations_as_text(tmp_path, meeting_data):
    """Every hostile generation is shown, as the text it is, and no script of it runs; items.csv holds no formula
    and reads back as written; ratings downloaded from the page import."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from pipeline_lib.core.io import from_spreadsheet_cell

    score_file = tmp_path / "judge" / "primary" / "meeting_tiny" / "hostile" / "seed0" / "scores.jsonl"
    score_file.parent.mkdir(parents=True)
    responses = [HOSTILE[i % len(HOSTILE)] + ("" if i < len(HOSTILE) else f" #{i}") for i in range(24)]
    score_file.write_text("".join(json.dumps({"prompt_index": i % 12, "response": text, "score_100": 10.0 * (i % 7)})
                                  + "\n" for i, text in enumerate(responses)))
    scores = runs_written([score_file])
    out = tmp_path / "calibration"
    calibration.export_calibration("meeting_tiny", MEETING, scores, meeting_data, 24, 3, out)
    with open(out / "items.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))[1:]
    assert len(rows) == 24
    for _, context, response in rows:  # no cell a spreadsheet would run, and the import reads the text back
        for cell in (context, response):
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")) or cell == "-3"
    assert sorted(from_spreadsheet_cell(r[2]) for r in rows) == sorted(responses)
    assert any(r[2] == "'=HYPERLINK(\"http://127.0.0.1/\", \"click\")" for r in rows)
    page = (out / "rate.html").read_text()
    assert page.count("<script") == 2 and page.count("</script>") == 2 and "<!--" not in page

    driver = chromium(tmp_path / "downloads")
    try:
        driver.get((out / "rate.html").as_uri())
        assert driver.find_element(By.ID, "status").text == "0 / 24 outputs rated"
        shown = driver.execute_script("return [...document.querySelectorAll('.item .response')]"
                                      ".map(e => e.textContent)")
        assert sorted(shown) == sorted(responses)  # every item, each as its own text
        assert driver.execute_script("return document.body.dataset.pwned") is None
        assert driver.execute_script("return document.querySelectorAll('img, .item script').length") == 0
        for select in driver.find_elements(By.CSS_SELECTOR, "select"):
            Select(select).select_by_value("5")
        assert driver.find_element(By.ID, "status").text == "24 / 24 outputs rated"
        driver.find_element(By.ID, "download").click()
        target = tmp_path / "downloads" / "ratings_meeting_tiny.csv"
        deadline = time.monotonic() + 20
        while not target.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        driver.quit()
    result = calibration.agreement(target, out / "key" / "key.csv", scores, MEETING)
    assert result["status"] == "rated" and result["items_rated"] == 24 and result["items_compared"] == 24


@needs_browser
def test_rating_page_in_headless_chromium(exported, tmp_path):
    """Open rate.html from disk, rate every item, download the CSV, import it: the whole rater round trip."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    out, scores = exported
    downloads = tmp_path / "downloads"
    driver = chromium(downloads)
    try:
        driver.get((out / "rate.html").as_uri())
        assert driver.find_element(By.ID, "status").text == "0 / 30 outputs rated"
        selects = driver.find_elements(By.CSS_SELECTOR, "select")
        assert len(selects) == 30 * 5
        for select in selects:  # rate by response length: a human-like, judge-independent signal
            response = driver.find_element(By.CSS_SELECTOR, f"#{select.get_attribute('data-item')} .response").text
            Select(select).select_by_value(str(1 + min(9, len(response.split()) // 3)))
        assert driver.find_element(By.ID, "status").text == "30 / 30 outputs rated"
        # Ratings survive a reload (kept in local storage). Chromium commits a page's local storage to disk
        # asynchronously, so a reload right after the last rating may read the store before that commit lands (seen
        # once in CI on a loaded machine): reload until it shows the ratings, for at most 20 s.
        deadline = time.monotonic() + 20
        while True:
            driver.refresh()
            status = driver.find_element(By.ID, "status").text
            if status == "30 / 30 outputs rated" or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert status == "30 / 30 outputs rated"
        driver.find_element(By.ID, "download").click()
        target = downloads / "ratings_meeting_tiny.csv"
        deadline = time.monotonic() + 20
        while not target.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        driver.quit()
    rows = list(csv.DictReader(target.open()))
    assert len(rows) == 30 and set(rows[0]) == {"item_id", *MEETING.keys}
    assert calibration.main(["import", "--rubric", "meetingbank", "--ratings", str(target), "--key",
                             str(out / "key" / "key.csv"), "--scores", json.dumps(runs_record(scores)),
                             "--out", str(tmp_path / "agreement.json")]) == 0
    result = json.loads((tmp_path / "agreement.json").read_text())
    assert result["status"] == "rated" and result["items_compared"] == 30
    assert result["spearman"] > 0.5  # longer, fact-complete summaries score higher with both raters


def test_server_eval_backend_matches_the_generations_schema_and_resumes(tmp_path):
    """The OpenAI-compatible eval backend: same generations/metrics as the hf backend, per-sample seeds,
    greedy = temperature 0, token lengths from the server's usage, and a rerun served from its cache."""
    from pipeline_lib.core.data.tiny import generate_task
    from pipeline_lib.jobs.eval.evaluate import evaluate

    spec = {"n_train": 2, "n_test": 6, "imperfect_fraction": 0.0, "numbers_per_task": [3], "max_number": 9,
            "max_target": 100}
    data = tmp_path / "rl_test.parquet"
    frame = pd.DataFrame(generate_task("arith_tiny", spec, 0)["rl_test"])
    frame.to_parquet(data)
    gold = [r["ground_truth"].split("####")[-1].strip() for r in frame["reward_model"]]
    model_dir = tmp_path / "final"
    model_dir.mkdir()
    (model_dir / "model.safetensors").write_bytes(b"checkpoint bytes")

    def content(body):  # right for even-numbered prompts only
        index = next(i for i, row in enumerate(frame["prompt"]) if row[0]["content"] == body["messages"][0]["content"])
        return f"so the answer is \\boxed{{{gold[index] if index % 2 == 0 else -1}}}"

    eval_spec = {"samples": 2, "max_new_tokens": 32, "temperature": 1.0, "top_p": 1.0, "pass_k": [2],
                 "backend": "server", "server": {"endpoint": {}, "serve": {}}}
    with ChatServer(content=content) as server:
        eval_spec["server"]["endpoint"] = {"base_url": server.base_url, "model": "policy", "backoff_s": 0.01}
        metrics, generations = evaluate(model_dir, data, eval_spec, seed=5, work_dir=tmp_path / "out")
        asked = list(server.requests)
        again, _ = evaluate(model_dir, data, eval_spec, seed=5, work_dir=tmp_path / "out")
        assert len(server.requests) == len(asked)  # the rerun came from the cache
    assert metrics["pass@1_greedy"] == pytest.approx(0.5) and metrics["pass@2"] == pytest.approx(0.5)
    assert again == metrics and metrics["backend"] == "server" and metrics["mean_length_greedy"] == 5
    assert {(g["mode"], g["sample"]) for g in generations} == {("greedy", 0), ("sample", 0), ("sample", 1)}
    greedy = [r for r in asked if r["temperature"] == 0.0]
    assert len(greedy) == 6 and {r["seed"] for r in asked if r["temperature"] == 1.0} == {5, 6}


def test_judge_targets_and_parse_time_validation():
    import copy

    import yaml

    from pipeline_lib.core.config import validate_config
    from pipeline_lib.plan.judges import judge_spec, validate_judges
    from pipeline_lib.plan.targets import stage_targets

    schema = REPO / "workflow/schemas/config.schema.yaml"
    tiny = validate_config(yaml.safe_load((REPO / "config/config.yaml").read_text()), schema)
    targets = stage_targets(tiny)
    assert "results/judge/second/meeting_tiny/softmax_sim/seed0/summary.json" in targets["judge"]
    assert {"results/judge/cross/meeting_tiny.json", "results/judge/calibration/meeting_tiny/agreement.json",
            "results/paper/tables/judge_validation.tex"} <= set(targets["all"])
    validate_judges(tiny)
    paper = validate_config(yaml.safe_load((REPO / "config/paper.yaml").read_text()), schema)  # it stands alone
    assert paper["judge"]["tasks"] == ["poetry", "meetingbank"]  # the tiny task does not leak into the paper run
    validate_judges(paper)
    assert judge_spec(paper, "primary")["endpoint"]["model"] == "Qwen/Qwen3-30B-A3B-Thinking-2507"
    assert judge_spec(paper, "second")["endpoint"]["model"] == "google/gemma-4-31B-it"
    assert "results/eval/transfer/openthoughts/softmax_sim/seed0/lm_eval.json" in stage_targets(paper)["eval"]
    broken = copy.deepcopy(paper)
    broken["judge"]["second"]["endpoint"].pop("model")
    broken["judge"]["second"]["serve"]["command"] = []
    with pytest.raises(ValueError) as excinfo:
        validate_judges(broken)
    assert "judge.second.endpoint.model" in str(excinfo.value) and "judge.second: set serve.command" in str(
        excinfo.value)


def test_nonverifiable_and_validation_tables_say_what_they_are(tmp_path, meeting_data):
    from pipeline_lib.paper.judging import nonverifiable_table, validation_table

    methods = ["bad", "cut", "good"]
    primary = [run_score(tmp_path, meeting_data, PROGRAMMATIC, "primary", m, m) for m in methods]
    second = [run_score(tmp_path, meeting_data, LENIENT, "second", m, m) for m in methods]
    lm_eval = tmp_path / "transfer/openthoughts/good/seed0/lm_eval.json"
    lm_eval.parent.mkdir(parents=True)
    lm_eval.write_text(json.dumps({"harness": "lm-evaluation-harness", "results": {"mmlu": {"acc,none": 0.652}}}))
    nonverifiable_table(runs_written(primary), methods, "tiny", tmp_path / "nv", runs_written([lm_eval]))
    table = (tmp_path / "nv.md").read_text()
    assert "strict (programmatic)" in table and "65.2" in table and "| bad |" in table
    assert "**" not in table.split("\n", 1)[1]  # one seed each: no cell is marked best (7e95729's claims rules)
    assert (tmp_path / "nv.csv").read_text().splitlines()[2].startswith("cut,")
    cross_path = tmp_path / "cross" / "meeting_tiny.json"
    cross_path.parent.mkdir()
    cross_path.write_text(json.dumps(cross.cross_judge(runs_written(primary), runs_written(second), methods)))
    agreement = tmp_path / "agreement.json"
    agreement.write_text(json.dumps({"status": "no ratings", "items_in_sample": 30}))
    validation_table([cross_path], [agreement], "good", "tiny", tmp_path / "val")
    frame = pd.read_csv(tmp_path / "val.csv")
    cells = dict(zip(frame["Evaluation"], frame["meeting_tiny"], strict=True))
    assert cells["Human-judge correlation (Pearson)"] == "no ratings yet"
    assert float(cells["Cross-judge rank correlation (Spearman, method means)"]) == pytest.approx(1.0)
