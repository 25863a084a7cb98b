"""Builders for the paper's datasets (App. B "Task and Dataset Details").

Each builder reads its raw sources (hub or local, see :mod:`pipeline_lib.core.data.sources`),
validates every row it uses (a bad row is a :class:`DataError` naming dataset, file and
row, or a counted filter in the manifest, never a silent drop) and writes RL parquet,
SFT parquet and ``manifest.json`` through :class:`~pipeline_lib.core.data.schema.DatasetWriter`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline_lib.core.data.schema import (
    AUTHORS_SYSTEM,
    MATH_SUFFIX,
    OPENTHOUGHTS_SYSTEM,
    POETRY_SYSTEM,
    DataError,
    DatasetWriter,
    holdout_mask,
    model_prompt,
    prompt_key,
    question_form,
    rl_row,
    sft_row,
)
from pipeline_lib.core.data.sources import _READERS, LINE, SourceSpec, load_split, where
from pipeline_lib.core.io import sha256_file
from pipeline_lib.core.rewards.extract import final_text

__all__ = ["BUILDERS", "build_dataset", "source_files", "sources_digest"]

#: The authors' Countdown prompt, word for word (``softmaxgrpo/prepare_data.py``; the paper gives none), for the exact
#: and the similarity-reward runs alike, so the two differ in their reward only.
COUNTDOWN_PROMPT = (
    "Using the numbers {numbers}, create an equation that equals {target}. "
    "Use only +, -, *, / and parentheses, and use each number exactly once. "
    "Show your work in <think> </think> tags and return the final expression in <answer> </answer> tags."
)
MEETING_PROMPT = "Summarize the following city council meeting transcript.\n\n{transcript}"


def _text(value: Any, dataset: str, location: str, column: str) -> str:
    """A non-empty string, stripped; anything else (missing, a number, NaN) is an error at ``location``."""
    if not isinstance(value, str) or not value.strip():
        raise DataError(dataset, location, f"column {column!r} must be a non-empty string, got {value!r:.200}")
    return value.strip()


def _gold(value: Any, dataset: str, location: str, column: str) -> str:
    """A gold answer as written: a string, or an exact JSON integer; never a float (``1e29``, ``7.0``) or missing."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_):
        return str(int(value))
    return _text(value, dataset, location, column)


_INT64 = (-(2**63), 2**63 - 1)


def _integer(value: Any, dataset: str, location: str, column: str) -> int:
    """An integer the output parquet can store (int64); a float, bool, string or a larger integer is an error."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_):
        if not _INT64[0] <= int(value) <= _INT64[1]:
            raise DataError(dataset, location, f"{column} must be an integer within the 64-bit range the datasets "
                            f"store, got {str(int(value))[:40]}{'...' if len(str(int(value))) > 40 else ''} "
                            f"({len(str(abs(int(value))))} digits)")
        return int(value)
    raise DataError(dataset, location, f"{column} must be an integer, got {value!r:.200} "
                    f"({type(value).__name__})")


def _optional_text(value: Any, dataset: str, location: str, column: str) -> str:
    """Metadata that may be missing (``""``), but is a string when present."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    if not isinstance(value, str):
        raise DataError(dataset, location, f"column {column!r} must be a string, got {value!r:.200}")
    return value


_DECIMAL = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")


def _gsm8k_gold(answer: str) -> str | None:
    """The number after ``####`` (thousands commas dropped), or None: a gold must be a plain finite decimal, never
    ``NaN``, ``inf``, ``1e400`` or ``1_000`` (all of which Python's ``float`` accepts)."""
    if "####" not in answer:
        return None
    gold = answer.rsplit("####", 1)[1].replace(",", "").strip()
    return gold if _DECIMAL.fullmatch(gold) else None


def _split_holdout(frame: pd.DataFrame, key: str, fraction: float, salt: str) -> dict[str, pd.DataFrame]:
    """Train/test by a hash of ``key``, a column equal between two rows exactly when their prompts are the same
    question (:func:`_keys`, the normal form), so every copy of a prompt, near-duplicates included, lands in one
    split."""
    mask = holdout_mask(frame[key].astype(str), fraction, salt)
    return {"train": frame[[not m for m in mask]], "test": frame[mask]}


PROMPT, GOLD = "_prompt", "_gold"  # the prompt's key (schema.prompt_key) and the gold of each source row
VERBATIM = "_verbatim"  # the model-visible prompt as written (schema.model_prompt), to count near-duplicates merged
FORM = "_form"  # the prompt's one varying text in its normal form (schema.question_form): what the split hashes
TEXT = "_text"  # the prompt's one varying text as written: what the manifest's merge kinds compare


def _keys(render: Callable[[str], list[dict[str, str]]], texts: list[str]) -> dict[str, list[str]]:
    """The ``PROMPT`` (key) and ``VERBATIM`` columns of rows whose prompt is ``render(text)``: the key renders the
    text's normal form (:func:`question_form`, so a question's own trailing punctuation counts even when a template
    follows it) and normalises the whole prompt (:func:`prompt_key`)."""
    forms = [question_form(t) for t in texts]
    return {PROMPT: [prompt_key(render(f)) for f in forms], VERBATIM: [model_prompt(render(t)) for t in texts],
            FORM: forms, TEXT: list(texts)}

CONFLICTING_GOLDS = "prompt with conflicting golds (every copy removed)"
CONFLICTING_GOLDS_RULE = ("a prompt whose rows disagree on the gold (answer or reference) is removed from every split, "
                          f"counted under filters[{CONFLICTING_GOLDS!r}]")


def _hold_out(writer: DatasetWriter, splits: dict[str, pd.DataFrame], key: str = PROMPT,
              gold: str | None = GOLD) -> None:
    """The held-out rule, on the exact prompt the model sees (column ``key``), every removal counted:

    * a prompt whose rows disagree on the gold (``gold``: the answer or reference) is removed everywhere, since no
      one of its golds can be trusted over the others;
    * a prompt repeated within the test split is kept once (evaluation counts each prompt once);
    * a training row whose prompt is in the test split is removed, then repeats within train are kept once.

    Prompts that differ verbatim but share a key (near-duplicates) are counted: ``near_duplicates_merged``.
    """
    every = pd.concat(list(splits.values()))
    if VERBATIM in every.columns:
        writer.count_near_duplicates(every[VERBATIM], every[key], every[TEXT] if TEXT in every.columns else None)
    if gold is not None:
        every = pd.concat(list(splits.values()))
        golds = every.groupby(key)[gold].nunique()
        conflicting = set(golds[golds > 1].index)
        for split, frame in splits.items():
            drop = frame[key].isin(conflicting)
            writer.count_filter(CONFLICTING_GOLDS, int(drop.sum()))
            splits[split] = frame[~drop]
    within = splits["test"][key].duplicated()
    writer.count_filter("duplicate prompt within test", int(within.sum()))
    splits["test"] = splits["test"][~within]
    _drop_train_duplicates(writer, splits, key)


def _drop_train_duplicates(writer: DatasetWriter, splits: dict[str, pd.DataFrame], key: str) -> None:
    """Prompts of the test split must not appear in train: drop them from train, counted."""
    test_keys = set(splits["test"][key])
    leaked = splits["train"][key].isin(test_keys)
    writer.count_filter("train prompt also in test (removed from train)", int(leaked.sum()))
    splits["train"] = splits["train"][~leaked]
    within = splits["train"][key].duplicated()
    writer.count_filter("duplicate prompt within train", int(within.sum()))
    splits["train"] = splits["train"][~within]


def _math_prompt(question: str) -> list[dict[str, str]]:
    """The authors' math prompt (``softmaxgrpo/prepare_data.py``): their system message, then the question and
    :data:`MATH_SUFFIX` on its own line."""
    return [{"role": "system", "content": AUTHORS_SYSTEM}, {"role": "user", "content": f"{question}\n{MATH_SUFFIX}"}]


def _countdown_prompt(numbers: Any, target: Any) -> list[dict[str, str]]:
    """The authors' Countdown prompt with their system message; ``numbers`` printed as a Python list of ints."""
    content = COUNTDOWN_PROMPT.format(numbers=[int(n) for n in numbers], target=int(target))
    return [{"role": "system", "content": AUTHORS_SYSTEM}, {"role": "user", "content": content}]


def build_gsm8k(writer: DatasetWriter, spec: dict[str, Any]) -> None:
    main = SourceSpec.from_config(spec["sources"]["main"])
    demos = SourceSpec.from_config(spec["sources"]["demonstrations"])
    splits, facts, split_facts = {}, [], {}
    for split in ("train", "test"):
        splits[split], split_facts[split] = load_split(writer.name, main, split, ("question", "answer"))
        facts.append(split_facts[split])
    demo_frame, demo_fact = load_split(writer.name, demos, "train", ("question", "cot", "final_answer"))
    facts.append(demo_fact)
    demo_by_question = {}
    for q, c, a, line in zip(demo_frame["question"], demo_frame["cot"], demo_frame["final_answer"],
                             demo_frame[LINE], strict=True):
        at = where(demo_fact, line)
        demo_by_question[_text(q, writer.name, at, "question")] = (
            _text(c, writer.name, at, "cot"), _gold(a, writer.name, at, "final_answer"))
    writer.source["files"] = facts
    for split, frame in splits.items():  # validated and rendered before the split filters, which compare prompts
        questions, answers, golds = [], [], []
        for question, answer, line in zip(frame["question"], frame["answer"], frame[LINE], strict=True):
            at = where(split_facts[split], line)
            questions.append(_text(question, writer.name, at, "question"))
            answers.append(_text(answer, writer.name, at, "answer"))
            golds.append(_gsm8k_gold(answers[-1]))
        frame = frame.assign(question=questions, answer=answers, **{GOLD: golds}, **_keys(_math_prompt, questions))
        unparseable = frame[GOLD].isna()
        writer.count_filter("unparseable gold answer (no finite decimal number after ####)", int(unparseable.sum()))
        splits[split] = frame[~unparseable]
    _hold_out(writer, splits)
    for split, frame in splits.items():
        rl, sft = [], []
        for question, answer, gold in zip(frame["question"], frame["answer"], frame[GOLD], strict=True):
            prompt = _math_prompt(question)
            demo = demo_by_question.get(question)
            reference = (f"{demo[0].strip()}\n\nThe final answer is \\boxed{{{demo[1].strip()}}}." if demo else None)
            extra = {"index": len(rl), "split": split, "reference_answer": answer, "reference": reference or answer,
                     "gold": gold}
            rl.append(rl_row(prompt=prompt, data_source="openai/gsm8k", ability="math", ground_truth=gold,
                             extra_info=extra))
            if split == "train":
                if demo is None:
                    writer.count_filter("train question without a gsm8k-cot-120b demonstration (no SFT row)", 1)
                else:
                    sft.append(sft_row([*prompt, {"role": "assistant", "content": reference}], extra))
        writer.write("rl", split, rl)
        if split == "train":
            writer.write("sft", split, sft)


def _countdown_tasks(frame: pd.DataFrame, fact: dict[str, Any], dataset: str, sizes: tuple[int, ...] = (3, 4)
                     ) -> pd.DataFrame:
    """``nums`` as a list of integers (``sizes`` of them) and ``target`` an integer in every row, else a DataError
    naming the file and line (a 7.9 target is never truncated to 7); adds the de-duplication key ``_key``."""
    numbers, targets = [], []
    for nums, target, line in zip(frame["nums"], frame["target"], frame[LINE], strict=True):
        at = where(fact, line)
        if not isinstance(nums, list | tuple | np.ndarray):
            raise DataError(dataset, at, f"nums must be a list of integers, got {nums!r:.200}")
        values = [_integer(n, dataset, at, "every entry of nums") for n in nums]
        if len(values) not in sizes:
            raise DataError(dataset, at, f"expected {'-'.join(map(str, sizes))} numbers, got {values}")
        numbers.append(values)
        targets.append(_integer(target, dataset, at, "target"))
    return frame.assign(nums=pd.Series(numbers, index=frame.index, dtype=object), target=targets,
                        _key=[json.dumps([sorted(n), t]) for n, t in zip(numbers, targets, strict=True)])


def build_countdown(writer: DatasetWriter, spec: dict[str, Any]) -> None:
    """Exact-reward RL from Countdown-Tasks-3to4 (``rl_*``); SFT demonstrations and the similarity-reward
    prompts with their reference answers from Countdown-Task-GOLD (``sft_train``, ``rl_sim_train``).
    GOLD prompts that also occur in the RL test split are dropped, so evaluation stays held out."""
    main = SourceSpec.from_config(spec["sources"]["main"])
    gold = SourceSpec.from_config(spec["sources"]["gold"])
    frame, fact = load_split(writer.name, main, "train", ("target", "nums"))
    gold_frame, gold_fact = load_split(writer.name, gold, "train", ("nums", "target", "messages"))
    writer.source["files"] = [fact, gold_fact]
    splits = _split_holdout(_countdown_tasks(frame, fact, writer.name), "_key", spec["holdout_fraction"],
                            writer.name)
    gold_frame = _countdown_tasks(gold_frame, gold_fact, writer.name)
    # _key (sorted numbers, target) is equal for any two equal prompts, and decides the gold: no conflicts possible
    _hold_out(writer, splits, "_key", None)
    for split, part in splits.items():
        rows = []
        for numbers, target in zip(part["nums"], part["target"], strict=True):
            rows.append(rl_row(prompt=_countdown_prompt(numbers, target), data_source=main.hub,
                               ability="math", ground_truth={"numbers": numbers, "target": target},
                               extra_info={"index": len(rows), "split": split, "numbers": numbers,
                                           "target": target}))
        writer.write("rl", split, rows)

    leaked = gold_frame["_key"].isin(set(splits["test"]["_key"]))
    writer.count_filter("GOLD task also in the RL test split (removed)", int(leaked.sum()))
    gold_frame = gold_frame[~leaked]
    sim, sft = [], []
    for numbers, target, messages, line in zip(gold_frame["nums"], gold_frame["target"], gold_frame["messages"],
                                               gold_frame[LINE], strict=True):
        at = where(gold_fact, line)
        if not isinstance(messages, list | tuple | np.ndarray) or not all(isinstance(m, dict) for m in messages):
            raise DataError(writer.name, at, f"messages must be a list of {{role, content}} objects, "
                            f"got {messages!r:.200}")
        messages = [dict(m) for m in messages]
        roles = [m.get("role") for m in messages]
        if not roles or roles[-1] != "assistant" or "user" not in roles:
            raise DataError(writer.name, at, f"messages must end user -> assistant, got {roles}")
        for message in messages:
            _text(message.get("content"), writer.name, at, f"messages[{message.get('role')}].content")
        extra = {"index": len(sim), "split": "train", "numbers": numbers, "target": target,
                 "reference": messages[-1]["content"]}
        # GOLD's own system and user turns are replaced by the prompt every Countdown run sees (the authors' too)
        prompt = _countdown_prompt(numbers, target)
        sim.append(rl_row(prompt=prompt, data_source=gold.hub, ability="math",
                          ground_truth={"numbers": numbers, "target": target}, extra_info=extra))
        sft.append(sft_row([*prompt, messages[-1]], extra))
    writer.write("sft", "train", sft)
    writer.write("rl_sim", "train", sim)


def _difficulty(value: Any, dataset: str, location: str) -> float:
    """DeepMath's difficulty label (metadata): a number, a numeric CSV cell, or missing (NaN)."""
    if value is None or value == "":
        return float("nan")
    number = None
    if isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool | np.bool_):
        with contextlib.suppress(OverflowError):  # a JSON integer beyond a float's range
            number = float(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value)
    if number is None or np.isinf(number):  # NaN is the missing label, as an empty cell is
        raise DataError(dataset, location, f"difficulty must be a finite number, got {value!r:.200}")
    return number


def build_deepmath(writer: DatasetWriter, spec: dict[str, Any]) -> None:
    source = SourceSpec.from_config(spec["sources"]["main"])
    columns = ("question", "final_answer", "r1_solution_1", "r1_solution_2", "r1_solution_3")
    frame, fact = load_split(writer.name, source, "train", columns)
    writer.source["files"] = [fact]
    questions, golds = [], []
    for question, answer, line in zip(frame["question"], frame["final_answer"], frame[LINE], strict=True):
        at = where(fact, line)
        questions.append(_text(question, writer.name, at, "question"))
        golds.append(_gold(answer, writer.name, at, "final_answer"))
    frame = frame.assign(_question=questions, **{GOLD: golds}, **_keys(_math_prompt, questions))
    splits = _split_holdout(frame, FORM, spec["holdout_fraction"], writer.name)
    _hold_out(writer, splits)
    for split, part in splits.items():
        rl, sft = [], []
        for row in part.to_dict("records"):
            at = where(fact, row[LINE])
            question, gold = row["_question"], row[GOLD]
            solutions = [row[c] for c in columns[2:] if isinstance(row[c], str) and row[c].strip()]
            if not solutions:  # the recipe trains on the shortest r1 solution; a row with none is dropped, counted
                writer.count_filter("no non-empty r1 solution", 1)
                continue
            shortest = min(solutions, key=len)
            # r_sim's reference is the solution with the shortest final text (the authors' prepare_data.py takes
            # min(final_text(solution)) by length); the SFT demonstration stays the shortest whole solution
            reference = min(solutions, key=lambda solution: len(final_text(solution)))
            prompt = _math_prompt(question)
            extra = {"index": len(rl), "split": split, "reference": reference, "gold": gold,
                     "topic": _optional_text(row.get("topic"), writer.name, at, "topic"),
                     "difficulty": _difficulty(row.get("difficulty"), writer.name, at)}
            rl.append(rl_row(prompt=prompt, data_source=source.hub, ability="math", ground_truth=gold,
                             extra_info=extra))
            if split == "train":
                sft.append(sft_row([*prompt, {"role": "assistant", "content": shortest}], extra))
        writer.write("rl", split, rl)
        if split == "train":
            writer.write("sft", split, sft)


def _chat_dataset(writer: DatasetWriter, split: str, items: list[tuple[list[dict[str, str]], str, dict]],
                  data_source: str, ability: str) -> None:
    rl, sft = [], []
    for prompt, reference, fields in items:
        extra = {"index": len(rl), "split": split, "reference": reference, **fields}
        rl.append(rl_row(prompt=prompt, data_source=data_source, ability=ability, ground_truth=reference,
                         extra_info=extra, style="model"))
        if split == "train":
            sft.append(sft_row([*prompt, {"role": "assistant", "content": reference}], extra))
    writer.write("rl", split, rl)
    if split == "train":
        writer.write("sft", split, sft)


def build_poetry(writer: DatasetWriter, spec: dict[str, Any], instructions: dict[str, str | None]) -> None:
    """Poems plus the synthesised instruction that would have produced each (``instructions`` by poem)."""
    source = SourceSpec.from_config(spec["sources"]["main"])
    column = spec["text_column"]
    frame, fact = load_split(writer.name, source, "train", (column,))
    writer.source["files"] = [fact]
    poems = [_text(p, writer.name, where(fact, line), column)
             for p, line in zip(frame[column], frame[LINE], strict=True)]
    instructions_of = [instructions.get(poem) for poem in poems]
    keys = _keys(_poetry_prompt, [i or "" for i in instructions_of])
    frame = frame.assign(_poem=poems, _instruction=instructions_of, **{GOLD: poems},
                         **{column: [k if i else None for k, i in zip(values, instructions_of, strict=True)]
                            for column, values in keys.items()})
    failed = frame["_instruction"].isna() | (frame["_instruction"] == "")
    writer.count_filter("instruction synthesis failed (rerun to retry; finished items are cached)", int(failed.sum()))
    if failed.sum() == 0:  # counted only when it happened (a rerun that fixed every item says nothing)
        writer.filters.pop("instruction synthesis failed (rerun to retry; finished items are cached)")
    # the model sees the instruction, not the poem: two poems given the same instruction are one prompt
    splits = _split_holdout(frame[~failed], PROMPT, spec["holdout_fraction"], writer.name)
    _hold_out(writer, splits)
    for split, part in splits.items():
        items = [(_poetry_prompt(i), poem, {"instruction": i}) for i, poem in zip(part["_instruction"], part["_poem"],
                                                                                  strict=True)]
        _chat_dataset(writer, split, items, source.hub, "poetry")


def _poetry_prompt(instruction: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": POETRY_SYSTEM}, {"role": "user", "content": instruction}]


def build_meetingbank(writer: DatasetWriter, spec: dict[str, Any]) -> None:
    source = SourceSpec.from_config(spec["sources"]["main"])
    transcript_column, summary_column = spec["transcript_column"], spec["summary_column"]
    frame, fact = load_split(writer.name, source, "train", (transcript_column, summary_column))
    writer.source["files"] = [fact]
    transcripts, summaries = [], []
    for transcript, summary, line in zip(frame[transcript_column], frame[summary_column], frame[LINE], strict=True):
        at = where(fact, line)
        transcripts.append(_text(transcript, writer.name, at, transcript_column))
        summaries.append(_text(summary, writer.name, at, summary_column))
    frame = frame.assign(_transcript=transcripts, **{GOLD: summaries}, **_keys(_meeting_prompt, transcripts))
    splits = _split_holdout(frame, FORM, spec["holdout_fraction"], writer.name)
    _hold_out(writer, splits)
    for split, part in splits.items():
        items = [(_meeting_prompt(t), summary, {"transcript": t})
                 for t, summary in zip(part["_transcript"], part[GOLD], strict=True)]
        _chat_dataset(writer, split, items, source.hub, "summarization")


def _meeting_prompt(transcript: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": MEETING_PROMPT.format(transcript=transcript)}]


def build_openthoughts(writer: DatasetWriter, spec: dict[str, Any]) -> None:
    source = SourceSpec.from_config(spec["sources"]["main"])
    frame, fact = load_split(writer.name, source, "train", ("conversations",))
    writer.source["files"] = [fact]
    pairs = []
    domains = frame["domain"] if "domain" in frame.columns else [None] * len(frame)
    for conversation, domain, line in zip(frame["conversations"], domains, frame[LINE], strict=True):
        at = where(fact, line)
        if not isinstance(conversation, list | tuple | np.ndarray) or not all(isinstance(t, dict)
                                                                               for t in conversation):
            raise DataError(writer.name, at, f"conversations must be a list of turns, got {conversation!r:.200}")
        turns = [dict(t) for t in conversation]
        if [t.get("from") for t in turns] != ["human", "gpt"]:
            raise DataError(writer.name, at, f"conversations must be [human, gpt], got "
                            f"{[t.get('from') for t in turns]}")
        pairs.append((_text(turns[0].get("value"), writer.name, at, "conversations[0].value"),
                      _text(turns[1].get("value"), writer.name, at, "conversations[1].value"),
                      _optional_text(domain, writer.name, at, "domain")))
    table = pd.DataFrame(pairs, columns=["question", "response", "domain"])
    table = table.assign(**{GOLD: table["response"]}, **_keys(_openthoughts_prompt, list(table["question"])))
    splits = _split_holdout(table, FORM, spec["holdout_fraction"], writer.name)
    _hold_out(writer, splits)
    for split, part in splits.items():
        items = [(_openthoughts_prompt(q), r, {"domain": d})
                 for q, r, d in zip(part["question"], part["response"], part["domain"], strict=True)]
        _chat_dataset(writer, split, items, source.hub, "reasoning")


def _openthoughts_prompt(question: str) -> list[dict[str, str]]:
    """The authors' OpenThoughts prompt: their system message (:data:`OPENTHOUGHTS_SYSTEM`), then the question."""
    return [{"role": "system", "content": OPENTHOUGHTS_SYSTEM}, {"role": "user", "content": question}]


BUILDERS: dict[str, tuple[Callable[..., None], str]] = {
    "gsm8k": (build_gsm8k, "MIT (openai/gsm8k); demonstrations HAD653/gsm8k-cot-120b: see its card"),
    "countdown": (build_countdown,
                  "see the Jiayi-Pan/Countdown-Tasks-3to4 and HuggingFaceTB/Countdown-Task-GOLD cards"),
    "deepmath": (build_deepmath, "MIT (zwhe99/DeepMath-103K)"),
    "poetry": (build_poetry, "see the jnb666/poems card; instructions synthesised by the configured LLM"),
    "meetingbank": (build_meetingbank,
                    "CC BY-NC-SA 4.0 (microsoft/MeetingBank-LLMCompressed): NON-COMMERCIAL use only"),
    "openthoughts": (build_openthoughts, "Apache-2.0 (open-thoughts/OpenThoughts3-1.2M)"),
}


def source_files(spec: Mapping[str, Any]) -> list[str]:
    """Every local file a dataset's build may read (config ``data.datasets.<name>``): each source role's ``local``
    file, or every readable file (``.parquet``, ``.jsonl``, ``.json``, ``.csv``) in its ``local`` folder, of which the
    builder reads its splits'. The data rules declare them as inputs and the build records them in its sidecars, so an
    edited raw file reruns the build and fails the audit of what was built from it. A hub source has none (its
    revision is part of the spec, hence of the rule's parameters)."""
    files = []
    for role in sorted(spec.get("sources") or {}):
        local = (spec["sources"][role] or {}).get("local")
        if not isinstance(local, str) or not local.strip():
            continue
        root = Path(local)
        if root.is_dir():
            files += sorted(str(p) for p in root.iterdir() if p.is_file() and p.suffix in _READERS)
        else:
            files.append(str(root))  # missing: Snakemake names it as a missing input, the build as a missing file
    return list(dict.fromkeys(files))


def sources_digest(paths: list[str]) -> str:
    """The digest of the content of every raw file a build reads (:func:`source_files`), a parameter of its rule: any
    content change (same size, a restored mtime, ``cp -p`` from an older backup) changes it, so Snakemake plans the
    build again. Only the files of jobs in the plan are read, each once per Snakemake process (:func:`_file_digest`).
    A missing file digests as ``missing`` (Snakemake names it as a missing input)."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(f"{path}\0{_file_digest(path)}\0".encode())
    return digest.hexdigest()


def _file_digest(path: str) -> str:
    try:
        stat = os.stat(path)
    except OSError:
        return "missing"
    # ctime and inode cannot be restored by hand (cp -p, touch -d set only mtime): safe as an in-process cache key
    return _content_digest(path, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


@functools.cache
def _content_digest(path: str, inode: int, size: int, mtime_ns: int, ctime_ns: int) -> str:
    return sha256_file(path)


def build_dataset(name: str, spec: dict[str, Any], out_dir: Path, **kwargs: Any) -> DatasetWriter:
    if name not in BUILDERS:
        raise ValueError(f"unknown dataset {name!r}; builders: {sorted(BUILDERS)}")
    builder, licence = BUILDERS[name]
    writer = DatasetWriter(
        name=name, out_dir=out_dir, licence=licence,
        source={role: SourceSpec.from_config(s).describe() for role, s in spec["sources"].items()},
        split_policy=("official train/test splits" if name == "gsm8k" else
                      f"deterministic holdout of {spec.get('holdout_fraction')} grouped by prompt hash "
                      f"(salt {name!r}); test prompts removed from train"),
    )
    builder(writer, spec, **kwargs)
    writer.finish({"held_out": {"compared_on": "the model-visible prompt (every message's role and content, verbatim)",
                                "prompts_shared_by_train_and_test": len(writer.shared_prompts()),
                                "conflicting_golds": CONFLICTING_GOLDS_RULE}})
    return writer
