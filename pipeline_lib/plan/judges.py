"""The judges' settings, read from the config's ``judge`` section: each judge's section with its defaults, the
rubric of a judged task, the requests a scoring job keeps in flight and the parse-time check that every judge can
score. Which runs are judged is the plan's (:func:`pipeline_lib.plan.targets.judged_runs`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline_lib.core.env import env
from pipeline_lib.core.rubrics import RUBRICS

__all__ = ["JUDGES", "calibration_ratings", "judge_concurrency", "judge_rubric", "judge_rubric_prompt", "judge_spec",
           "pairwise_rubric_prompt", "pairwise_tasks", "validate_judges"]

JUDGES = ("primary", "second")


def judge_spec(config: Mapping[str, Any], judge: str) -> dict[str, Any]:
    """One judge's section with the schema defaults a ``$ref``'d section does not get filled."""
    if judge not in JUDGES:
        raise ValueError(f"unknown judge {judge!r}; judges: {JUDGES}")
    spec = {"kind": "programmatic", "label": "programmatic rubric judge", "basis": "facts", "weighting": "strict",
            "parse_retries": 2, "endpoint": {}, "serve": {}}
    return spec | dict(config["judge"].get(judge) or {})


def judge_rubric(config: Mapping[str, Any], task: str) -> str:
    return config["judge"]["rubrics"][task]


def judge_rubric_prompt(config: Mapping[str, Any], task: str) -> str:
    """The rubric prompt template of a judged task, ``config/prompts/<rubric>.txt`` of the workflow's directory (the
    checkout the judge reads it from; relative, so a package imported from elsewhere plans the same): an input of its
    judge jobs."""
    return f"config/prompts/{RUBRICS[judge_rubric(config, task)].template_path.name}"


def pairwise_tasks(config: Mapping[str, Any]) -> dict[str, str]:
    """Judged tasks also scored against their expert reference -> the pairwise rubric (``judge.pairwise``)."""
    pairwise = config["judge"].get("pairwise") or {}
    return {task: pairwise[task] for task in config["judge"]["tasks"] if task in pairwise}


def pairwise_rubric_prompt(config: Mapping[str, Any], task: str) -> str:
    """The pairwise rubric's template of a task (:func:`judge_rubric_prompt`'s pairwise twin): an input of its
    pairwise judge jobs."""
    return f"config/prompts/{RUBRICS[pairwise_tasks(config)[task]].template_path.name}"


def validate_judges(config: Mapping[str, Any]) -> None:
    """Fail at parse time (``snakemake -n``) on a judge that could not score, naming the key."""
    problems = []
    missing = [task for task in config["judge"]["tasks"] if task not in config["judge"]["rubrics"]]
    if missing:
        raise ValueError(f"judge.rubrics has no rubric for judged task(s) {missing}")
    rubrics = {judge_rubric(config, task) for task in config["judge"]["tasks"]}
    for name in JUDGES:
        spec = judge_spec(config, name)
        where = f"judge.{name}"
        if spec["kind"] == "programmatic" and rubrics - {"meetingbank"}:
            problems.append(f"{where}: a programmatic judge scores only the MeetingBank rubric of synthetic tasks, "
                            f"not {sorted(rubrics - {'meetingbank'})}; use kind: llm")
        if spec["kind"] == "programmatic" and pairwise_tasks(config):
            problems.append(f"{where}: {sorted(pairwise_tasks(config))} are judged pairwise against the reference "
                            "(judge.pairwise), which a programmatic judge cannot do; use kind: llm")
        if spec["kind"] == "llm":
            if not spec["endpoint"].get("model"):
                problems.append(f"{where}.endpoint.model: an LLM judge needs the served model name")
            if not (spec["serve"].get("command") or spec["endpoint"].get("base_url")
                    or env("OPENAI_BASE_URL")):
                problems.append(f"{where}: set serve.command (start a server for the job) or endpoint.base_url "
                                "(or OPENAI_BASE_URL)")
    if problems:
        raise ValueError("invalid judge config:\n  - " + "\n  - ".join(problems))


def judge_concurrency(config: Mapping[str, Any], judge: str) -> int:
    """Requests one scoring job keeps in flight: the Snakemake global resource ``judge_requests`` it holds."""
    spec = judge_spec(config, judge)
    return int(spec["endpoint"].get("concurrency", 8)) if spec["kind"] == "llm" else 0


def calibration_ratings(config: Mapping[str, Any], task: str) -> list[str]:
    """The task's completed ratings CSV (an input: adding or editing it reruns the import), else nothing; a configured
    path must exist (:func:`pipeline_lib.core.config.validate_config`), so a typo is an error, never "no ratings
    yet"."""
    path = config["judge"]["calibration"]["ratings"].get(task)
    return [path] if path else []
