"""Judge verdicts holding non-finite numbers (NaN, Infinity, 1e400, thousands of digits), nested 100,000 deep or not
a string are parse errors (issue "Nothing silent"): such an answer is asked again, then its item fails, an earlier
valid verdict never masks a bad final one, and the cache never wedges a rerun. The cases are rows of
docs/hostile_cases.md."""

from __future__ import annotations

import json
import sqlite3

import pytest

from pipeline_lib.core.rubrics import RUBRICS
from pipeline_lib.jobs.judge.parse import VerdictParseError, parse_verdict

POETRY = RUBRICS["poetry"]
GOOD = '{"A": 7, "B": 6, "C": 8, "D": 5, "E": 7, "F": 6, "G": 8}'
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1" + "0" * 400, "9" * 5000]


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
    from tests.chat_server import ChatServer

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
        uncached = [[{k: v for k, v in r.items() if k != "cached"} for r in rs] for rs in (again, results)]
        assert len(server.requests) == asked + unparseable and uncached[0] == uncached[1]  # now from the cache
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
