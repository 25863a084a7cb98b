"""Score one run's held-out generations with one judge (the ``judge_score`` rule).

``python -m pipeline_lib.jobs.judge.score --judge JSON --rubric meetingbank --generations G --data D --out DIR``
``python -m pipeline_lib.jobs.judge.score --judge JSON --rubric poetry_pairwise --pairwise ...`` (against the
expert reference: each item judged in both orders, :data:`PAIRWISE_ORDERS`; its ``score_100`` is 100 x its mean
outcome, win 1, tie 0.5, loss 0, so the summary's ``score_100`` is the win rate, an unscored item a loss)

Writes ``scores.jsonl`` (one line per judged prompt: the judged text, per-dimension scores and the 0-100 score, or
``failed`` with the reason, ``refused`` where the judged text held the verdict) and ``summary.json``
(:func:`summarise`). An item without a verdict is never left out of the score (issue 60: a candidate that wrote its
judge's verdict into its own text had its low verdicts refused, hence dropped): the summary counts refused and
failed items and gives the 0-100 score with every such item at the scale's lowest and at its highest score
(``score_100_bounds``); ``score_100``, what every table and claim reads (:func:`reported_score`), is the lowest, the
conservative end. A refused item is the candidate's doing, not the judge's, so it never fails the job; a job whose
share of failed items is over the judge's ``max_failed_fraction`` (default 0: any item that exhausted its retries)
exits 1 naming them, writing no outputs, so Snakemake reruns it (answers already given stay in the cache and are not
asked again). The summary also states which endpoint gave the scored verdicts and how many came from the cache
(``verdicts_by``; a cached answer is reused only for the endpoint that gave it:
:mod:`pipeline_lib.core.llm_client`). An endpoint whose circuit opened (refused, failing, or asking to wait past the
cap) ends the job the same way, in one logged sentence. A generations file that holds one prompt's judged response
twice is an error naming both lines (it would be asked and counted twice).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline_lib.core.cli import entry_parser, json_text, setup_logging
from pipeline_lib.core.io import output_set, write_json, write_text
from pipeline_lib.core.llm_client import EndpointConfig, EndpointUnavailableError
from pipeline_lib.core.provenance import write_provenance
from pipeline_lib.core.rewards.extract import after_think
from pipeline_lib.core.rubrics import RUBRICS, Rubric
from pipeline_lib.jobs.judge.llm import cached_results, judge_with_llm
from pipeline_lib.jobs.judge.programmatic import judge_meeting_by_overlap, judge_meeting_summary
from pipeline_lib.jobs.judge.serve import served_endpoint

__all__ = ["PAIRWISE_ORDERS", "JudgeFailedError", "check_failures", "describe_judge", "judge_id", "judge_items",
           "judge_pairwise", "load_items", "pairwise_fields", "pairwise_outcome", "prompt_row", "reported_score",
           "summarise"]

log = logging.getLogger("pipeline_lib.jobs.judge.score")


class JudgeFailedError(RuntimeError):
    """More items failed to score than the judge's ``max_failed_fraction`` allows."""


def prompt_row(value: Any, rows: int, where: str, data: Path) -> int:
    """A record's ``prompt_index`` as a row of the task data; an error naming the line otherwise (``iloc[-1]``
    would silently judge the last row)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < rows:
        raise ValueError(f"{where}: prompt_index {value!r} is not a row of {data} (0 to {rows - 1})")
    return value


def load_items(generations: Path, data: Path, mode: str = "greedy") -> list[dict[str, Any]]:
    """One item per prompt: the judged response (text after any ``</think>``) and the task row it answers."""
    frame = pd.read_parquet(data)
    items = []
    seen: dict[int, int] = {}
    with open(generations, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            record = json.loads(line)
            if record["mode"] != mode or record["sample"] != 0:
                continue
            index = prompt_row(record.get("prompt_index"), len(frame), f"{generations}:{line_no}", data)
            if index in seen:
                raise ValueError(f"{generations}:{line_no}: prompt_index {index} ({mode}, sample 0) already given at "
                                 f"line {seen[index]}; a duplicated generation would be judged and counted twice")
            seen[index] = line_no
            extra = frame["extra_info"].iloc[index]
            items.append({"prompt_index": index, "response": after_think(record["text"]).strip(),
                          "reference": frame["reward_model"].iloc[index]["ground_truth"],
                          "extra_info": extra, "prompt": frame["prompt"].iloc[index]})
    if not items:
        raise ValueError(f"{generations}: no {mode!r} generations to judge")
    return items


def _rubric_fields(rubric: Rubric, item: dict[str, Any]) -> dict[str, str]:
    extra = item["extra_info"]
    if rubric.name == "meetingbank":
        if "transcript" not in extra:
            raise KeyError(f"row {item['prompt_index']}: extra_info has no 'transcript' for the MeetingBank rubric")
        return {"MEETING_TITLE": str(extra.get("title") or ""), "TRANSCRIPT_TEXT": str(extra["transcript"]),
                "SUMMARY_TEXT": item["response"]}
    return {"POEM_TEXT": item["response"]}


def _programmatic(judge: dict[str, Any], rubric: Rubric, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    if rubric.name != "meetingbank":
        raise ValueError(f"the programmatic judge scores the MeetingBank rubric of synthetic tasks, "
                         f"not {rubric.name!r}")
    results = []
    if judge.get("basis", "facts") == "overlap":
        for item in items:
            if "transcript" not in item["extra_info"]:
                raise KeyError(f"row {item['prompt_index']}: extra_info has no 'transcript' for the overlap judge")
            scores = judge_meeting_by_overlap(item["response"], item["extra_info"]["transcript"], item["reference"])
            results.append({"scores": scores, "score_100": rubric.normalise(scores)})
        return results
    for item in items:
        facts = item["extra_info"].get("facts")
        if not facts:
            raise ValueError(f"row {item['prompt_index']}: no structured 'facts' in extra_info; the programmatic "
                             "judge only scores tasks generated from facts (meeting_tiny); use an `llm` judge")
        scores = judge_meeting_summary(item["response"], facts, item["reference"], judge["weighting"])
        results.append({"scores": scores, "score_100": rubric.normalise(scores)})
    return results


def _endpoint(judge: dict[str, Any], rubric: Rubric, section: dict[str, Any]) -> EndpointConfig:
    """The judge's endpoint, asking for the rubric's JSON schema in the form its ``structured_output`` names; a
    served judge is known by its ``serve.command`` (its address is a port chosen per run)."""
    endpoint = EndpointConfig.from_config(section, f"judge {judge.get('label')!r}")
    structured = rubric.structured_sampling(endpoint.structured_output)
    if structured:
        endpoint = dataclasses.replace(endpoint, sampling={**endpoint.sampling, **structured})
    command = (judge.get("serve") or {}).get("command") or []
    if command:
        endpoint = dataclasses.replace(endpoint, served=tuple(str(part) for part in command))
    return endpoint


def _llm(judge: dict[str, Any], rubric: Rubric, fields: Sequence[dict[str, str]], cache: Path, server_log: Path
         ) -> list[dict[str, Any]]:
    """Answers from the cache first; the judge server (``serve.command``) is started only if some request is not
    cached, so a rerun whose answers are all stored never waits for (or holds GPUs for) a server it would not ask.
    ``fields``: each request's rubric fields."""
    from tqdm import tqdm

    items = fields
    retries = judge.get("parse_retries", 2)
    section = judge.get("endpoint", {})
    # a served judge's cache keys hold its command, not its address (it has none until started)
    served = bool((judge.get("serve") or {}).get("command"))
    keys = _endpoint(judge, rubric, {**section, "base_url": "http://unserved.invalid/v1"} if served else section)
    cached = cached_results(rubric, fields, keys, cache, retries)
    missing = sum(result is None for result in cached)
    if not missing:
        log.info("judge %r: all %d items answered from %s; no server started", judge.get("label"), len(items), cache)
        return [result for result in cached if result is not None]
    log.info("judge %r: %d of %d items not in %s", judge.get("label"), missing, len(items), cache)
    with served_endpoint(section, judge.get("serve", {}), server_log) as endpoint_section:
        endpoint = _endpoint(judge, rubric, endpoint_section)
        with tqdm(total=len(items), desc=f"judge {judge.get('label')}", unit="item") as bar:
            return judge_with_llm(rubric, fields, endpoint, cache, parse_retries=retries, on_done=bar.update)


def judge_items(judge: dict[str, Any], rubric: Rubric, items: Sequence[dict[str, Any]], cache: Path,
                server_log: Path) -> list[dict[str, Any]]:
    kind = judge.get("kind", "programmatic")
    if kind == "programmatic":
        return _programmatic(judge, rubric, items)
    if kind == "llm":
        return _llm(judge, rubric, [_rubric_fields(rubric, item) for item in items], cache, server_log)
    raise ValueError(f"unknown judge kind {kind!r} (programmatic, llm)")


#: The two orders every pairwise item is judged in: the candidate as the first poem, then as the second (order
#: debiasing by judging both orders, not a random one: a judge preferring a position favours neither text).
PAIRWISE_ORDERS = ("candidate_first", "reference_first")


def pairwise_fields(rubric: Rubric, item: dict[str, Any]) -> list[dict[str, str]]:
    """The item's two requests (:data:`PAIRWISE_ORDERS`): the judged text and the task's expert reference, in both
    orders."""
    first, second = rubric.fields
    candidate, reference = item["response"], str(item["reference"])
    return [{first: candidate, second: reference}, {first: reference, second: candidate}]


def _side_100(scores: dict[str, int], keys: Sequence[str]) -> float:
    return 10.0 * sum(scores[k] for k in keys) / len(keys)


def pairwise_outcome(rubric: Rubric, orders: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One item's result from its two orders' results (:data:`PAIRWISE_ORDERS`): ``score_100`` = 100 x the
    candidate's mean outcome against the reference over both orders (1 when its seven-dimension mean is higher, 0.5
    on a tie, 0 when lower), with each side's 0-100 rubric score; an order refused (the judged text held the verdict)
    refuses the item, an order failed fails it."""
    refused = [r for r in orders if r.get("refused")]
    if refused:
        return {"failed": refused[0]["failed"], "refused": True}
    failed = [r for r in orders if "score_100" not in r]
    if failed:
        return {"failed": failed[0]["failed"]}
    detail, outcomes, candidate, reference = [], [], [], []
    for position, result in enumerate(orders):  # the candidate is side 0 in the first order, side 1 in the second
        own = _side_100(result["scores"], rubric.sides[position])
        other = _side_100(result["scores"], rubric.sides[1 - position])
        outcome = 1.0 if own > other else 0.5 if own == other else 0.0
        outcomes.append(outcome)
        candidate.append(own)
        reference.append(other)
        detail.append({"order": PAIRWISE_ORDERS[position], "scores": result["scores"], "candidate_100": own,
                       "reference_100": other, "outcome": outcome, "attempts": result.get("attempts"),
                       "cached": result.get("cached")})
    return {"score_100": 100.0 * statistics.fmean(outcomes), "candidate_100": statistics.fmean(candidate),
            "reference_100": statistics.fmean(reference), "orders": detail,
            "cached": all(r.get("cached") for r in orders), "answered_by": orders[0].get("answered_by")}


def judge_pairwise(judge: dict[str, Any], rubric: Rubric, items: Sequence[dict[str, Any]], cache: Path,
                   server_log: Path) -> list[dict[str, Any]]:
    """Each item against its expert reference in both orders (one request each, through the same cached client and
    verdict parser as the isolated score: neither poem's text can be the verdict), combined by
    :func:`pairwise_outcome`. An LLM judge only: the programmatic judges score MeetingBank summaries in isolation."""
    if not rubric.sides:
        raise ValueError(f"rubric {rubric.name!r} scores one text; a pairwise judgement needs a pairwise rubric")
    if judge.get("kind", "programmatic") != "llm":
        raise ValueError(f"judge {judge.get('label')!r}: pairwise judging against the reference needs kind: llm")
    fields = [order for item in items for order in pairwise_fields(rubric, item)]
    results = _llm(judge, rubric, fields, cache, server_log)
    width = len(PAIRWISE_ORDERS)
    return [pairwise_outcome(rubric, results[i * width:(i + 1) * width]) for i in range(len(items))]


def describe_judge(judge: dict[str, Any]) -> dict[str, Any]:
    """What a table may say about a judge (never an API key)."""
    description = {"kind": judge.get("kind", "programmatic"), "label": judge.get("label", "")}
    if description["kind"] == "programmatic":
        description["basis"] = judge.get("basis", "facts")
        if description["basis"] == "facts":
            description["weighting"] = judge.get("weighting", "strict")
    else:
        endpoint = judge.get("endpoint", {})
        description |= {"model": endpoint.get("model"), "revision": endpoint.get("revision"),
                        "sampling": endpoint.get("sampling", {}),
                        "structured_output": endpoint.get("structured_output", "none"),
                        "served": bool(judge.get("serve", {}).get("command"))}
    return description


def judge_id(identity: dict[str, Any]) -> str:
    """A short name for an endpoint's identity (``answered_by``), as ``scores.jsonl`` and ``verdicts_by`` give it."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]


def summarise(rubric: Rubric, results: Sequence[dict[str, Any]], judge: dict[str, Any]) -> dict[str, Any]:
    """Counts (scored, refused, failed), the 0-100 score with every unscored item at the scale's lowest and highest
    score (``score_100_bounds``), ``score_100`` = the lowest (None when no item was scored or refused: the judge gave
    nothing), the mean over scored items alone and its per-dimension means (what the judge said, not a claim), and
    ``verdicts_by``: each endpoint that gave scored verdicts, with how many and how many from the cache."""
    scored = [r for r in results if "score_100" in r]
    refused = sum(1 for r in results if r.get("refused"))
    summary: dict[str, Any] = {"judge": describe_judge(judge), "rubric": rubric.name, "items": len(results),
                               "scored": len(scored), "refused": refused,
                               "failed": len(results) - len(scored) - refused}
    # a pairwise score is a win rate against the reference: an unscored item counts as a loss, then as a win
    ends = [0.0, 100.0] if rubric.sides else [rubric.normalise(dict.fromkeys(rubric.keys, end))
                                              for end in rubric.scale]
    summary["scale_100"] = ends
    if rubric.sides:
        summary["comparison"] = {"against": "the task's expert reference", "orders": list(PAIRWISE_ORDERS),
                                 "score_100": "100 x mean outcome over both orders (win 1, tie 0.5, loss 0)"}
    if scored or refused:
        total, unscored = sum(r["score_100"] for r in scored), len(results) - len(scored)
        low, high = ((total + unscored * end) / len(results) for end in ends)
        summary |= {"score_100": low, "score_100_bounds": {"low": low, "high": high}}
    else:
        summary |= {"score_100": None, "score_100_bounds": None}
    summary["score_100_scored"] = statistics.fmean(r["score_100"] for r in scored) if scored else None
    if scored and rubric.sides:  # each side's mean 0-100 rubric score over the scored items, both orders
        summary |= {side: statistics.fmean(r[side] for r in scored) for side in ("candidate_100", "reference_100")}
    elif scored:
        summary["dimensions"] = {k: statistics.fmean(r["scores"][k] for r in scored) for k in rubric.keys}
    by: dict[str, dict[str, Any]] = {}
    for result in scored:
        if result.get("answered_by") is not None:
            entry = by.setdefault(judge_id(result["answered_by"]),
                                  {"endpoint": result["answered_by"], "verdicts": 0, "cached": 0})
            entry["verdicts"] += 1
            entry["cached"] += bool(result.get("cached"))
    if by:
        summary["verdicts_by"] = by
    return summary


def reported_score(summary: dict[str, Any], where: Path | str) -> float | None:
    """The score a table or claim reports: ``score_100``, unscored items at the scale's lowest score. A summary
    written before issue 60 left its unscored items out of ``score_100``: with any, it is an error naming the file
    (rerun its ``judge_score``), never read as the conservative score."""
    if "score_100_bounds" not in summary and summary.get("failed"):
        raise ValueError(f"{where}: a judge summary from before issue 60, whose score leaves its {summary['failed']} "
                         "unscored item(s) out; rerun its judge_score job (cached answers are not asked again)")
    return summary["score_100"]


def check_failures(judge: dict[str, Any], items: Sequence[dict[str, Any]], results: Sequence[dict[str, Any]],
                   where: Path) -> None:
    """:class:`JudgeFailedError` naming the failed items when their share is over ``max_failed_fraction``."""
    bound = float(judge.get("max_failed_fraction", 0.0))
    failed = [(item["prompt_index"], result["failed"]) for item, result in zip(items, results, strict=True)
              if "failed" in result and not result.get("refused")]  # refused: the candidate's doing, counted low
    if failed and len(failed) / len(items) > bound:
        shown = "; ".join(f"prompt_index {index}: {reason}"[:300] for index, reason in failed[:5])
        raise JudgeFailedError(f"{where}: {len(failed)} of {len(items)} items failed to score, over the judge's "
                               f"max_failed_fraction {bound} (first: {shown}); rerun once the judge endpoint "
                               "answers (scored items are cached and not asked again)")


def main(argv: list[str] | None = None) -> int:
    parser = entry_parser(__doc__, summary="line", logs=False)
    parser.add_argument("--judge", required=True, type=json_text,
                        help="the judge's config section: a JSON file or inline JSON")
    parser.add_argument("--rubric", required=True, choices=sorted(RUBRICS))
    parser.add_argument("--generations", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--mode", default="greedy", choices=["greedy", "sample"])
    parser.add_argument("--pairwise", action="store_true",
                        help="judge each text against the task's expert reference in both orders (--rubric: a "
                             "pairwise rubric); score_100 is the win rate")
    parser.add_argument("--cache", type=Path, required=True, help="SQLite response cache shared by this judge's jobs")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    setup_logging()
    judge = json.loads(args.judge)
    rubric = RUBRICS[args.rubric]
    if args.pairwise != bool(rubric.sides):
        parser.error(f"--rubric {args.rubric} is {'a pairwise' if rubric.sides else 'an isolated'} rubric: "
                     f"{'pass' if rubric.sides else 'drop'} --pairwise")
    items = load_items(args.generations, args.data, args.mode)
    try:
        judged = judge_pairwise if args.pairwise else judge_items
        results = judged(judge, rubric, items, args.cache, args.out / "server.log")
    except EndpointUnavailableError as exc:  # one sentence, no traceback: the answers given so far are cached
        log.error("judge %r: %s", judge.get("label"), exc)
        return 1
    try:
        check_failures(judge, items, results, args.generations)
    except JudgeFailedError as exc:
        log.error("%s", exc)
        return 1
    lines = [json.dumps({"prompt_index": item["prompt_index"], "response": item["response"], **result}
                        | ({"answered_by": judge_id(result["answered_by"])} if result.get("answered_by") else {}))
             + "\n" for item, result in zip(items, results, strict=True)]
    summary = summarise(rubric, results, judge)
    if summary["failed"]:  # within max_failed_fraction
        log.warning("%d of %d items failed to score (see scores.jsonl 'failed')", summary["failed"], len(items))
    if summary["refused"]:
        log.warning("%d of %d items refused: the judged text held the judge's verdict; counted at the scale's "
                    "lowest and highest score (score_100_bounds)", summary["refused"], len(items))
    outputs = (args.out / "scores.jsonl", args.out / "summary.json")
    with output_set(*outputs):  # a full disk mid-write leaves neither file (nor an older copy beside a new one)
        write_text(outputs[0], "".join(lines))
        write_json(outputs[1], summary)
        write_provenance(list(outputs), step="judge_score", inputs=[args.generations, args.data],
                         params={"judge": describe_judge(judge), "rubric": rubric.name, "mode": args.mode,
                                 **({"pairwise": True} if args.pairwise else {})})
    bounds = summary["score_100_bounds"] or {"low": float("nan"), "high": float("nan")}
    log.info("%s: score %.1f (%.1f with unscored items at the top) over %d items, %d scored, %d refused", args.out,
             bounds["low"], bounds["high"], len(items), summary["scored"], summary["refused"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
