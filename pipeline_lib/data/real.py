"""Builders for the paper's datasets (App. B "Task and Dataset Details").

Each builder reads its raw sources (hub or local, see :mod:`pipeline_lib.data.sources`),
validates every row it uses (a bad row is a :class:`DataError` naming dataset, file and
row, or a counted filter in the manifest, never a silent drop) and writes RL parquet,
SFT parquet and ``manifest.json`` through :class:`~pipeline_lib.data.schema.DatasetWriter`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline_lib.data.schema import MATH_SUFFIX, POETRY_SYSTEM, DataError, DatasetWriter, holdout_mask, rl_row, sft_row
from pipeline_lib.data.sources import SourceSpec, load_split

__all__ = ["BUILDERS", "build_dataset"]

COUNTDOWN_PROMPT = (
    "Using the numbers {numbers}, create an equation that equals {target}. You can use basic arithmetic operations "
    "(+, -, *, /) and each number can only be used once. Show your work in <think> </think> tags and return the "
    "final equation in <answer> </answer> tags, for example <answer> (1 + 2) / 3 </answer>."
)
MEETING_PROMPT = "Summarize the following city council meeting transcript.\n\n{transcript}"


def _text(value: Any, dataset: str, origin: str, row: int, column: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DataError(dataset, origin, f"column {column!r} must be a non-empty string, got {value!r}", row)
    return value.strip()


def _gsm8k_gold(answer: str) -> str | None:
    if "####" not in answer:
        return None
    gold = answer.rsplit("####", 1)[1].replace(",", "").strip()
    try:
        float(gold)
    except ValueError:
        return None
    return gold


def _split_holdout(frame: pd.DataFrame, key: str, fraction: float, salt: str) -> dict[str, pd.DataFrame]:
    mask = holdout_mask(frame[key].astype(str), fraction, salt)
    return {"train": frame[[not m for m in mask]], "test": frame[mask]}


def _drop_train_duplicates(writer: DatasetWriter, splits: dict[str, pd.DataFrame], key: str) -> None:
    """Prompts of the test split must not appear in train: drop them from train, counted."""
    test_keys = set(splits["test"][key])
    leaked = splits["train"][key].isin(test_keys)
    writer.count_filter("train prompt also in test (removed from train)", int(leaked.sum()))
    splits["train"] = splits["train"][~leaked]
    within = splits["train"][key].duplicated()
    writer.count_filter("duplicate prompt within train", int(within.sum()))
    splits["train"] = splits["train"][~within]


def build_gsm8k(writer: DatasetWriter, spec: dict[str, Any]) -> None:
    main = SourceSpec.from_config(spec["sources"]["main"])
    demos = SourceSpec.from_config(spec["sources"]["demonstrations"])
    splits, facts = {}, []
    for split in ("train", "test"):
        splits[split], fact = load_split(writer.name, main, split, ("question", "answer"))
        facts.append(fact)
    demo_frame, fact = load_split(writer.name, demos, "train", ("question", "cot", "final_answer"))
    facts.append(fact)
    demo_by_question = {str(q).strip(): (str(c), str(a)) for q, c, a in
                        zip(demo_frame["question"], demo_frame["cot"], demo_frame["final_answer"], strict=True)}
    writer.source["files"] = facts
    _drop_train_duplicates(writer, splits, "question")
    for split, frame in splits.items():
        rl, sft = [], []
        for position, (question, answer) in enumerate(zip(frame["question"], frame["answer"], strict=True)):
            question = _text(question, writer.name, f"{split} split", position, "question")
            answer = _text(answer, writer.name, f"{split} split", position, "answer")
            gold = _gsm8k_gold(answer)
            if gold is None:
                writer.count_filter("unparseable gold answer (no numeric text after ####)", 1)
                continue
            prompt = [{"role": "user", "content": f"{question} {MATH_SUFFIX}"}]
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


def _countdown_key(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(_key=[json.dumps([sorted(int(n) for n in nums), int(t)])
                              for nums, t in zip(frame["nums"], frame["target"], strict=True)])


def build_countdown(writer: DatasetWriter, spec: dict[str, Any]) -> None:
    """Exact-reward RL from Countdown-Tasks-3to4 (``rl_*``); SFT demonstrations and the similarity-reward
    prompts with their reference answers from Countdown-Task-GOLD (``sft_train``, ``rl_sim_train``).
    GOLD prompts that also occur in the RL test split are dropped, so evaluation stays held out."""
    main = SourceSpec.from_config(spec["sources"]["main"])
    gold = SourceSpec.from_config(spec["sources"]["gold"])
    frame, fact = load_split(writer.name, main, "train", ("target", "nums"))
    gold_frame, gold_fact = load_split(writer.name, gold, "train", ("nums", "target", "messages"))
    writer.source["files"] = [fact, gold_fact]
    splits = _split_holdout(_countdown_key(frame), "_key", spec["holdout_fraction"], writer.name)
    _drop_train_duplicates(writer, splits, "_key")
    for split, part in splits.items():
        rows = []
        for position, (nums, target) in enumerate(zip(part["nums"], part["target"], strict=True)):
            numbers = [int(n) for n in nums]
            if not 3 <= len(numbers) <= 4:
                raise DataError(writer.name, f"{split} split", f"expected 3-4 numbers, got {numbers}", position)
            content = COUNTDOWN_PROMPT.format(numbers=numbers, target=int(target))
            rows.append(rl_row(prompt=[{"role": "user", "content": content}], data_source=main.hub,
                               ability="math", ground_truth={"numbers": numbers, "target": int(target)},
                               extra_info={"index": len(rows), "split": split, "numbers": numbers,
                                           "target": int(target)}))
        writer.write("rl", split, rows)

    gold_frame = _countdown_key(gold_frame)
    leaked = gold_frame["_key"].isin(set(splits["test"]["_key"]))
    writer.count_filter("GOLD task also in the RL test split (removed)", int(leaked.sum()))
    gold_frame = gold_frame[~leaked]
    sim, sft = [], []
    for position, (nums, target, messages) in enumerate(
            zip(gold_frame["nums"], gold_frame["target"], gold_frame["messages"], strict=True)):
        messages = [dict(m) for m in messages]
        roles = [m.get("role") for m in messages]
        if not roles or roles[-1] != "assistant" or "user" not in roles:
            raise DataError(writer.name, gold_fact["file"], f"messages must end user -> assistant, got {roles}",
                            position)
        numbers = [int(n) for n in nums]
        extra = {"index": len(sim), "split": "train", "numbers": numbers, "target": int(target),
                 "reference": messages[-1]["content"]}
        sim.append(rl_row(prompt=messages[:-1], data_source=gold.hub, ability="math",
                          ground_truth={"numbers": numbers, "target": int(target)}, extra_info=extra))
        sft.append(sft_row(messages, extra))
    writer.write("sft", "train", sft)
    writer.write("rl_sim", "train", sim)


def build_deepmath(writer: DatasetWriter, spec: dict[str, Any]) -> None:
    source = SourceSpec.from_config(spec["sources"]["main"])
    columns = ("question", "final_answer", "r1_solution_1", "r1_solution_2", "r1_solution_3")
    frame, fact = load_split(writer.name, source, "train", columns)
    writer.source["files"] = [fact]
    splits = _split_holdout(frame, "question", spec["holdout_fraction"], writer.name)
    _drop_train_duplicates(writer, splits, "question")
    for split, part in splits.items():
        rl, sft = [], []
        for position, row in enumerate(part.itertuples(index=False)):
            question = _text(row.question, writer.name, f"{split} split", position, "question")
            gold = _text(str(row.final_answer), writer.name, f"{split} split", position, "final_answer")
            solutions = [s for s in (row.r1_solution_1, row.r1_solution_2, row.r1_solution_3)
                         if isinstance(s, str) and s.strip()]
            if not solutions:
                writer.count_filter("no non-empty r1 solution", 1)
                continue
            shortest = min(solutions, key=len)
            prompt = [{"role": "user", "content": f"{question} {MATH_SUFFIX}"}]
            extra = {"index": len(rl), "split": split, "reference": shortest, "gold": gold,
                     "topic": str(getattr(row, "topic", "")), "difficulty": float(getattr(row, "difficulty", "nan"))}
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
    frame = frame.assign(_poem=[_text(p, writer.name, fact["file"], i, column) for i, p in enumerate(frame[column])])
    splits = _split_holdout(frame, "_poem", spec["holdout_fraction"], writer.name)
    _drop_train_duplicates(writer, splits, "_poem")
    for split, part in splits.items():
        items = []
        for poem in part["_poem"]:
            instruction = instructions.get(poem)
            if not instruction:
                writer.count_filter("instruction synthesis failed (rerun to retry; finished items are cached)", 1)
                continue
            prompt = [{"role": "system", "content": POETRY_SYSTEM}, {"role": "user", "content": instruction}]
            items.append((prompt, poem, {"instruction": instruction}))
        _chat_dataset(writer, split, items, source.hub, "poetry")


def build_meetingbank(writer: DatasetWriter, spec: dict[str, Any]) -> None:
    source = SourceSpec.from_config(spec["sources"]["main"])
    transcript_column, summary_column = spec["transcript_column"], spec["summary_column"]
    frame, fact = load_split(writer.name, source, "train", (transcript_column, summary_column))
    writer.source["files"] = [fact]
    splits = _split_holdout(frame, transcript_column, spec["holdout_fraction"], writer.name)
    _drop_train_duplicates(writer, splits, transcript_column)
    for split, part in splits.items():
        items = []
        for position, (transcript, summary) in enumerate(
                zip(part[transcript_column], part[summary_column], strict=True)):
            transcript = _text(transcript, writer.name, f"{split} split", position, transcript_column)
            summary = _text(summary, writer.name, f"{split} split", position, summary_column)
            prompt = [{"role": "user", "content": MEETING_PROMPT.format(transcript=transcript)}]
            items.append((prompt, summary, {"transcript": transcript}))
        _chat_dataset(writer, split, items, source.hub, "summarization")


def build_openthoughts(writer: DatasetWriter, spec: dict[str, Any]) -> None:
    source = SourceSpec.from_config(spec["sources"]["main"])
    frame, fact = load_split(writer.name, source, "train", ("conversations",))
    writer.source["files"] = [fact]
    pairs = []
    for position, conversation in enumerate(frame["conversations"]):
        turns = [dict(t) for t in conversation]
        if [t.get("from") for t in turns] != ["human", "gpt"]:
            raise DataError(writer.name, fact["file"], f"conversations must be [human, gpt], got "
                            f"{[t.get('from') for t in turns]}", position)
        pairs.append((_text(turns[0]["value"], writer.name, fact["file"], position, "conversations[0].value"),
                      _text(turns[1]["value"], writer.name, fact["file"], position, "conversations[1].value"),
                      str(frame["domain"].iloc[position]) if "domain" in frame.columns else ""))
    table = pd.DataFrame(pairs, columns=["question", "response", "domain"])
    splits = _split_holdout(table, "question", spec["holdout_fraction"], writer.name)
    _drop_train_duplicates(writer, splits, "question")
    for split, part in splits.items():
        items = [([{"role": "user", "content": q}], r, {"domain": d})
                 for q, r, d in zip(part["question"], part["response"], part["domain"], strict=True)]
        _chat_dataset(writer, split, items, source.hub, "reasoning")


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
    writer.finish()
    return writer
