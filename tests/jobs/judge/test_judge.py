"""Judge rubrics and verdict parsing (the judge issue's foundations)."""

import pytest

from pipeline_lib.core.rubrics import RUBRICS
from pipeline_lib.jobs.judge.parse import VerdictParseError, parse_verdict

POETRY_KEYS = RUBRICS["poetry"].keys
GOOD = '{"A": 7, "B": 6, "C": 8, "D": 5, "E": 7, "F": 6, "G": 8}'


def test_rubrics_render_the_papers_structure():
    poetry = RUBRICS["poetry"].render(POEM_TEXT="Snow on the bell tower")
    assert "POEM: <poem_text-" in poetry and "\nSnow on the bell tower\n</poem_text-" in poetry
    assert "G) Context & Coherence" in poetry
    meeting = RUBRICS["meetingbank"].render(MEETING_TITLE="Council", TRANSCRIPT_TEXT="Chair: ...",
                                            SUMMARY_TEXT="The council met.")
    assert '"redundancy": 1-10' in meeting and "CANDIDATE SUMMARY: <summary_text-" in meeting
    assert "\nThe council met.\n</summary_text-" in meeting
    with pytest.raises(KeyError, match="SUMMARY_TEXT"):
        RUBRICS["meetingbank"].render(MEETING_TITLE="x", TRANSCRIPT_TEXT="y")


def test_thinking_text_then_fenced_json():
    text = 'Line 3 uses {"A": 2} as a device... so:\n```json\n' + GOOD + "\n```"
    assert parse_verdict(text, POETRY_KEYS)["C"] == 8


def test_reasoning_field_is_used_only_when_the_answer_is_empty():
    assert parse_verdict("", POETRY_KEYS, reasoning="thinking... " + GOOD)["A"] == 7
    other = GOOD.replace('"A": 7', '"A": 9')
    assert parse_verdict(other, POETRY_KEYS, reasoning=GOOD)["A"] == 9
    with pytest.raises(VerdictParseError, match="no JSON object"):  # an answer without a verdict has none
        parse_verdict("I cannot score this.", POETRY_KEYS, reasoning=GOOD)


@pytest.mark.parametrize("text, match", [
    ('{"A": 7, "B": 6', "no JSON object"),
    ('{"A": 7, "B": 6, "C": 8}', "missing key"),
    (GOOD.replace('"G": 8', '"G": 11'), "outside 1-10"),
    (GOOD.replace('"G": 8', '"G": 7.5'), "not integers"),
    (GOOD.replace('"G": 8', '"G": "8"'), "not integers"),
    ("", "no JSON object"),
])
def test_bad_verdicts_are_errors_never_zero(text, match):
    with pytest.raises(VerdictParseError, match=match):
        parse_verdict(text, POETRY_KEYS)


def test_normalisation_to_the_papers_scale():
    scores = parse_verdict(GOOD, POETRY_KEYS)
    assert RUBRICS["poetry"].normalise(scores) == pytest.approx(10 * 47 / 7)


def test_llm_judge_retries_bad_verdicts_and_caches(tmp_path):
    from pipeline_lib.core.llm_client import EndpointConfig
    from pipeline_lib.jobs.judge.llm import judge_with_llm
    from tests.chat_server import ChatServer

    def content(body):
        poem = body["messages"][-1]["content"]
        if "broken" in poem and len(body["messages"]) == 1:
            return "I think it is good. {\"A\": 12}"  # out of range on the first ask
        if "hopeless" in poem:
            return "no verdict at all"
        return "Analysis: line 1 ... " + GOOD

    items = [{"POEM_TEXT": "a fine poem"}, {"POEM_TEXT": "a broken poem"}, {"POEM_TEXT": "a hopeless poem"}]
    with ChatServer(content=content, failures=[429, 500]) as server:
        endpoint = EndpointConfig.from_config({"base_url": server.base_url, "model": "judge", "backoff_s": 0.01,
                                               "concurrency": 1}, "judge")
        results = judge_with_llm(RUBRICS["poetry"], items, endpoint, tmp_path / "cache.sqlite")
        assert results[0]["score_100"] == pytest.approx(10 * 47 / 7)
        assert results[1]["attempts"] == 2 and results[1]["scores"]["A"] == 7
        assert results[2]["failed"].startswith("unparseable verdict")
        asked = len(server.requests)
        again = judge_with_llm(RUBRICS["poetry"], items, endpoint, tmp_path / "cache.sqlite")
    # a rerun answers the scored items from the cache, the broken poem by its stored re-ask (its first answer was
    # not kept); the hopeless poem's unparseable answers were not kept either, so its three asks are made again,
    # and it still fails the same way
    assert len(server.requests) == asked + 3 and _uncached(again) == _uncached(results)


def _uncached(results: list[dict]) -> list[dict]:
    """Results without their ``cached`` flag (a rerun's verdicts are the same, now read from the cache)."""
    return [{k: v for k, v in r.items() if k != "cached"} for r in results]


def test_programmatic_meeting_judge_rewards_facts_and_punishes_contradictions():
    from pipeline_lib.core.data.tiny import generate_task
    from pipeline_lib.jobs.judge.programmatic import judge_meeting_summary

    spec = {"n_train": 5, "n_test": 1, "imperfect_fraction": 0.0, "numbers_per_task": [3], "max_number": 9,
            "max_target": 100}
    row = generate_task("meeting_tiny", spec, 0)["rl_train"][0]
    facts, reference = row["extra_info"]["facts"], row["extra_info"]["reference"]
    perfect = judge_meeting_summary(reference, facts, reference)
    assert perfect == {"informativeness": 10, "factuality": 10, "fluency": perfect["fluency"], "coherence": 10,
                       "redundancy": 10} and perfect["fluency"] >= 8
    vote = f"{facts['votes_for']}-{facts['votes_against']}"
    swapped = reference.replace(vote, f"{facts['votes_for'] + 1}-{facts['votes_against']}")
    assert judge_meeting_summary(swapped, facts, reference)["factuality"] < perfect["factuality"]
    vague = "The council discussed some things."
    assert judge_meeting_summary(vague, facts, reference)["informativeness"] <= 3
    rambling = (reference + " ") * 6
    assert judge_meeting_summary(rambling, facts, reference)["redundancy"] < 5
    strict, lenient = (judge_meeting_summary(swapped, facts, reference, j)["factuality"] for j in ("strict", "lenient"))
    assert strict < lenient
    assert judge_meeting_summary("", facts, reference)["factuality"] == 1


def test_overlap_judge_is_built_differently_from_the_facts_judge():
    from pipeline_lib.core.data.tiny import generate_task
    from pipeline_lib.jobs.judge.programmatic import judge_meeting_by_overlap, judge_meeting_summary

    spec = {"n_train": 5, "n_test": 1, "imperfect_fraction": 0.0, "numbers_per_task": [3], "max_number": 9,
            "max_target": 100}
    row = generate_task("meeting_tiny", spec, 0)["rl_train"][0]
    transcript, reference, facts = (row["extra_info"][k] for k in ("transcript", "reference", "facts"))
    assert set(judge_meeting_by_overlap(reference, transcript, reference).values()) == {10}
    vague = judge_meeting_by_overlap("The council met.", transcript, reference)
    assert vague["informativeness"] <= 3 and vague["coherence"] <= 3
    invented = reference.replace(facts["mover"], "Xavier").replace(f"{facts['amount']:,}", "999,999")
    assert judge_meeting_by_overlap(invented, transcript, reference)["factuality"] < 10
    assert judge_meeting_by_overlap((reference + " ") * 4, transcript, reference)["redundancy"] <= 2
    # a swapped vote uses only numbers the transcript contains: the facts judge catches it, the overlap judge not
    vote = f"{facts['votes_for']}-{facts['votes_against']}"
    swapped = reference.replace(vote, f"{facts['votes_against']}-{facts['votes_for']}")
    assert judge_meeting_summary(swapped, facts, reference)["factuality"] < 10
    assert judge_meeting_by_overlap(swapped, transcript, reference)["factuality"] == 10
    assert judge_meeting_by_overlap("", transcript, reference) == dict.fromkeys(
        ("informativeness", "factuality", "fluency", "coherence", "redundancy"), 1)


# --- hostile verdicts, rows and disks (issue "Nothing silent, round two") ------------------------------------------

@pytest.mark.parametrize("prose", ["I'd say {the imagery is strong. ", "Set {x | x > 0} and {", "a { b { c ",
                                   '{"A": "unclosed string ', "{" * 5000],
                         ids=["prose", "latex-set", "nested-prose", "unclosed-json", "5000-braces"])
def test_a_stray_brace_before_the_verdict_does_not_lose_it(prose):
    assert parse_verdict(prose + "Final scores: " + GOOD, RUBRICS["poetry"].keys)["G"] == 8


def test_many_braces_after_the_verdict_are_bounded_work_not_a_hang():
    import time

    started = time.monotonic()
    with pytest.raises(VerdictParseError):
        parse_verdict('{"A": ' * 200_000, RUBRICS["poetry"].keys)
    assert time.monotonic() - started < 30  # 1,000 candidates at most, each cut at JSON's nesting limit


@pytest.mark.parametrize("index", [-1, 3, "1", 1.0, None, True])
def test_a_prompt_index_outside_the_data_is_an_error_naming_the_line(tmp_path, index):
    import json

    import pandas as pd

    from pipeline_lib.jobs.judge.score import load_items

    data = tmp_path / "data.parquet"
    pd.DataFrame({"prompt": ["p0", "p1", "p2"], "reward_model": [{"ground_truth": "g"}] * 3,
                  "extra_info": [{"i": i} for i in range(3)]}).to_parquet(data)
    generations = tmp_path / "generations.jsonl"
    lines = [{"prompt_index": 0, "mode": "greedy", "sample": 0, "text": "a"},
             {"prompt_index": index, "mode": "greedy", "sample": 0, "text": "b"}]
    generations.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(ValueError, match=r"generations\.jsonl:2: prompt_index .* is not a row of .*0 to 2"):
        load_items(generations, data)


def test_cached_unparseable_verdicts_do_not_keep_items_failed_after_the_server_is_fixed(tmp_path):
    from pipeline_lib.core.llm_client import EndpointConfig
    from pipeline_lib.jobs.judge.llm import judge_with_llm
    from tests.chat_server import ChatServer

    items = [{"POEM_TEXT": f"poem {i}"} for i in range(3)]

    def judge(server):
        endpoint = EndpointConfig.from_config({"base_url": server.base_url, "model": "judge", "backoff_s": 0.01},
                                              "judge")
        return judge_with_llm(RUBRICS["poetry"], items, endpoint, tmp_path / "cache.sqlite")

    with ChatServer(content=lambda request: "I cannot rate this.") as broken:
        assert all("unparseable verdict" in r["failed"] for r in judge(broken))
    with ChatServer(content=lambda request: "Scores: " + GOOD) as fixed:  # "rerun the judge" now helps
        assert [r["scores"]["G"] for r in judge(fixed)] == [8, 8, 8] and len(fixed.requests) == 3


def _limited_file_size(limit: int):
    """For a child process: files it writes stop growing at ``limit`` bytes (EFBIG), as on a full disk."""
    import resource
    import signal

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_judge_job_on_a_full_disk_exits_non_zero_and_a_rerun_keeps_what_was_stored(tmp_path):
    """Answers the server gave must never be lost while the job exits 0 (they were `failed: OperationalError`)."""
    import json
    import os
    import subprocess
    import sys

    import pandas as pd

    from tests.chat_server import ChatServer
    from tests.conftest import REPO

    n = 20
    data, generations = tmp_path / "data.parquet", tmp_path / "generations.jsonl"
    pd.DataFrame({"prompt": [f"p{i}" for i in range(n)], "reward_model": [{"ground_truth": "g"}] * n,
                  "extra_info": [{"i": i} for i in range(n)]}).to_parquet(data)
    generations.write_text("".join(json.dumps({"prompt_index": i, "mode": "greedy", "sample": 0,
                                               "text": f"poem {i}"}) + "\n" for i in range(n)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with ChatServer(content=lambda request: "Fine work. " + "x" * 3000 + " " + GOOD) as server:
        judge = {"kind": "llm", "label": "t", "endpoint": {"base_url": server.base_url, "model": "judge",
                                                           "backoff_s": 0.01, "concurrency": 1}}
        command = [sys.executable, "-m", "pipeline_lib.jobs.judge.score", "--judge", json.dumps(judge), "--rubric",
                   "poetry", "--generations", str(generations), "--data", str(data),
                   "--cache", str(tmp_path / "cache.sqlite"), "--out", str(tmp_path / "out")]
        full = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300,
                              preexec_fn=_limited_file_size(60_000))
        answered = len(server.requests)
        assert full.returncode != 0 and "cache.sqlite: cannot store" in full.stderr, full.stderr[-2000:]
        assert not (tmp_path / "out" / "summary.json").exists()
        rerun = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        assert rerun.returncode == 0, rerun.stderr[-2000:]
        summary = json.loads((tmp_path / "out" / "summary.json").read_text())
        assert (summary["scored"], summary["failed"]) == (n, 0)
        assert len(server.requests) - answered < n  # the answers stored before the disk filled were not re-asked


def test_a_served_judge_trickling_its_health_answer_cannot_stretch_the_startup_timeout(tmp_path):
    """Each /health probe and the whole wait have total deadlines (a per-read timeout never trips on a trickle)."""
    import sys
    import time

    from pipeline_lib.jobs.judge.serve import ServerStartError, served_endpoint
    from tests.conftest import REPO

    serve = {"command": [sys.executable, str(REPO / "tests" / "chat_server.py"), "--port", "{port}", "--trickle", "1"],
             "startup_timeout_s": 3}
    started = time.monotonic()
    with pytest.raises(ServerStartError, match="not healthy"), served_endpoint({}, serve, tmp_path / "server.log"):
        pass
    assert time.monotonic() - started < 3 + 5 + 5  # the limit, one probe's deadline, start-up slack


def test_unparseable_answers_stored_by_an_earlier_run_are_asked_again_at_once(tmp_path):
    """A cache written before this fix (or by another job) holds unparseable answers under every attempt's key:
    the first rerun against the fixed server scores every item, not a second one."""
    from pipeline_lib.core.llm_client import EndpointConfig, ResponseCache
    from pipeline_lib.jobs.judge.llm import _request, judge_with_llm
    from tests.chat_server import ChatServer

    items = [{"POEM_TEXT": f"poem {i}"} for i in range(3)]
    with ChatServer(content=lambda request: "Scores: " + GOOD) as fixed:
        endpoint = EndpointConfig.from_config({"base_url": fixed.base_url, "model": "judge", "backoff_s": 0.01},
                                              "judge")
        cache = ResponseCache(tmp_path / "cache.sqlite")
        for item in items:
            for attempt in range(3):
                key = _request(RUBRICS["poetry"], RUBRICS["poetry"].render(**item), attempt).cache_key(endpoint)
                cache.put(key, {"content": "I cannot rate this.", "reasoning": None,
                                "answered_by": endpoint.identity()})
        results = judge_with_llm(RUBRICS["poetry"], items, endpoint, tmp_path / "cache.sqlite")
        assert [r.get("scores", {}).get("G") for r in results] == [8, 8, 8] and len(fixed.requests) == 3
        again = judge_with_llm(RUBRICS["poetry"], items, endpoint, tmp_path / "cache.sqlite")
        assert [r["cached"] for r in results] == [False] * 3 and [r["cached"] for r in again] == [True] * 3
        assert _uncached(again) == _uncached(results) and len(fixed.requests) == 3  # good answers now cached


# --- hostile endpoints (issue 35, class 6) ------------------------------------------------------------------------


def _poetry_endpoint(server, **extra):
    from pipeline_lib.core.llm_client import EndpointConfig

    return EndpointConfig.from_config({"base_url": server.base_url, "model": "judge", "backoff_s": 0.01,
                                       "concurrency": 4, **extra}, "judge")


def test_retry_after_is_honoured(tmp_path):
    from pipeline_lib.jobs.judge.llm import judge_with_llm
    from tests.chat_server import ChatServer

    with ChatServer(content=lambda r: GOOD, failures=[429], error_headers={"Retry-After": "1"}) as server:
        results = judge_with_llm(RUBRICS["poetry"], [{"POEM_TEXT": "x"}], _poetry_endpoint(server, max_retries=3),
                                 tmp_path / "cache.sqlite")
        gap = server.times[1] - server.times[0]
    assert "score_100" in results[0]
    assert gap >= 0.95  # backoff_s alone asks again after ~0.01 s


def test_a_transport_failure_is_retried_with_the_same_prompt_and_never_re_evaluated(tmp_path):
    from pipeline_lib.core.llm_client import ResponseCache
    from pipeline_lib.jobs.judge.llm import judge_with_llm
    from tests.chat_server import ChatServer

    with ChatServer(content=lambda r: GOOD, failures=[503] * 3) as server:
        results = judge_with_llm(RUBRICS["poetry"], [{"POEM_TEXT": "x"}], _poetry_endpoint(server, max_retries=2),
                                 tmp_path / "cache.sqlite", parse_retries=2)
        requests = list(server.requests)
    assert results[0]["failed"].startswith("APIStatusError") or "503" in results[0]["failed"]
    assert len(requests) == 3 and all(r["messages"] == requests[0]["messages"] for r in requests)
    assert not any("Re-evaluation" in m["content"] for r in requests for m in r["messages"])
    with ChatServer(content=lambda r: GOOD, failures=[503]) as server:  # the rerun: same key, answered, cached
        results = judge_with_llm(RUBRICS["poetry"], [{"POEM_TEXT": "x"}], _poetry_endpoint(server, max_retries=2),
                                 tmp_path / "cache.sqlite", parse_retries=2)
        assert server.requests[1]["messages"] == requests[0]["messages"]
    assert "score_100" in results[0] and len(ResponseCache(tmp_path / "cache.sqlite")) == 1


def test_an_oversize_answer_is_refused_while_read_never_cached(tmp_path):
    from pipeline_lib.core.llm_client import ResponseCache
    from pipeline_lib.jobs.judge.llm import judge_with_llm
    from tests.chat_server import ChatServer

    huge = GOOD + " " * 3_000_000
    with ChatServer(content=lambda r: huge) as server:
        results = judge_with_llm(RUBRICS["poetry"], [{"POEM_TEXT": "x"}, {"POEM_TEXT": "y"}],
                                 _poetry_endpoint(server, max_retries=2), tmp_path / "cache.sqlite")
        assert len(server.requests) == 2  # refused, not retried: the same server sends the same body
    assert all("ResponseTooLargeError" in r["failed"] and "1048576" in r["failed"] for r in results)
    assert len(ResponseCache(tmp_path / "cache.sqlite")) == 0


@pytest.mark.parametrize("verdict_first", [False, True], ids=["hostile_text_then_verdict", "verdict_then_hostile"])
def test_parse_verdict_work_is_bounded_whatever_the_answers_length(monkeypatch, verdict_first):
    """A hostile answer (500 nested openings, then an unclosed list) made every ``{"`` decode to the end of the
    text: 29 s at 405 KB. Count the characters handed to the JSON decoder: linear in the text, within the stated
    bound, wherever the hostile part is."""
    import json

    from pipeline_lib.jobs.judge import parse

    class Counting(json.JSONDecoder):
        chars = 0

        def raw_decode(self, s, idx=0):
            Counting.chars += len(s) - idx
            return super().raw_decode(s, idx)

    monkeypatch.setattr(parse, "_DECODER", Counting())
    work = {}
    for size in (15_000, 405_000):
        Counting.chars = 0
        hostile = '{"a": ' * 500 + "[" + "1," * (size // 2)
        text = GOOD + " " + hostile if verdict_first else hostile + GOOD
        assert parse_verdict(text, POETRY_KEYS)["A"] == 7
        work[size] = Counting.chars
        assert work[size] <= parse.MAX_CANDIDATES * parse.MAX_OBJECT_CHARS + parse.FULL_DECODES * len(text)
    if not verdict_first:  # the search stops at the verdict: nothing before it is decoded
        assert work[405_000] <= 1.5 * work[15_000]


def test_a_served_judge_whose_free_port_is_taken_before_it_binds_starts_again_on_another(tmp_path, monkeypatch,
                                                                                         caplog):
    """The race of choosing a free port: another process binds it between the choice and the server's own bind. The
    server exits saying its address is in use, and the job starts it again on a fresh port; a port taken every time
    is a clear error after serve.PORT_TRIES starts."""
    import logging
    import socket
    import sys

    from pipeline_lib.jobs.judge import serve as serving
    from pipeline_lib.jobs.judge.serve import ServerStartError, served_endpoint
    from tests.conftest import REPO

    caplog.set_level(logging.INFO, logger="pipeline_lib.jobs.judge.serve")
    with socket.socket() as taken:  # bound, not listening, no SO_REUSEADDR: binds fail, probes refused
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        picks = iter([busy, busy])
        real = serving.free_port
        monkeypatch.setattr(serving, "free_port", lambda: next(picks, None) or real())
        command = {"command": [sys.executable, str(REPO / "tests" / "chat_server.py"), "--port", "{port}"],
                   "startup_timeout_s": 60}
        with served_endpoint({"model": "judge"}, command, tmp_path / "server.log") as endpoint:
            port = int(endpoint["base_url"].split(":")[2].split("/")[0])
            assert port != busy and endpoint["base_url"] == f"http://127.0.0.1:{port}/v1"
            assert serving._healthy(port)
        assert caplog.text.count(f"port {busy} was taken before it bound it") == 2
        assert "Address already in use" in (tmp_path / "server.log").read_text()

        monkeypatch.setattr(serving, "free_port", lambda: busy)
        with pytest.raises(ServerStartError, match=f"found its port taken {serving.PORT_TRIES} times"), \
                served_endpoint({}, command, tmp_path / "again.log"):
            pass
    with pytest.raises(ValueError, match=r"serve.port = 8000: removed \(issue 44\)"), \
            served_endpoint({}, {**command, "port": 8000}, tmp_path / "never.log"):
        pass
