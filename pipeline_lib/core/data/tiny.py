"""Tiny synthetic tasks for the embedded CPU default, in the real datasets' schemas.

* ``countdown_tiny``: 3-4 small numbers and a target reachable with + - * (proved by a
  solver that also writes the demonstration).
* ``arith_tiny``: GSM8K-style word problems, gold after ``####``.
* ``meeting_tiny``: city-council transcript segments generated from structured facts
  (motion, mover, seconder, amount, vote) with reference summaries built from the same
  facts; the facts travel in ``extra_info`` so a programmatic judge can score coverage.

Some demonstrations are deliberately imperfect: the expert slips with probability
``imperfect_fraction`` in general and ``blind_spot_slip`` on its blind spot, a subset of prompts
it can be recognised by (:data:`BLIND_SPOTS`; Countdown: the first number is at most 4; the word problems:
the person is Ava, Ben, Cleo or Dev; meetings: the mover is Ava, Ben or Cleo). Every row records whether it is on the
blind spot (``extra_info["blind_spot"]``), so the report splits gains by it without re-deriving it. In Countdown and
the word problems the slip is stopping one step early (the think/steps end after the first step and the
answer is that partial result), so it is decided by one token right after the first step, is as
easy to imitate as the correct demonstration, and is recognisable from the prompt; the blind
spot covers ~44% of the Countdown and ~40% of the word-problem prompts, so fixing it moves
held-out pass@1 by several points. (An earlier slip, "answer + 1" or a flipped last operator, needed
arithmetic the tiny model never learned, so SFT did not imitate it and RL had nothing systematic
to unlearn.) Where the slip is the majority, SFT imitates it even greedily, while sampling still
finds the full solution; a verifier reward can unlearn it, so RL has a measurable mechanism to
improve on its SFT start (the expert's systematic error).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline_lib.core.data.schema import question_form, rl_row, sft_row

#: The tiny tasks' instructions are shorter than the real datasets' (GSM8K's ``MATH_SUFFIX``, the TinyZero Countdown
#: prompt): the model learns the answer format from the demonstrations, and a constant instruction is tokens every
#: forward pass of the miniature pays for (half of a Countdown prompt's 64 tokens with the paper's wording).
TINY_MATH_SUFFIX = "Answer in \\boxed{}."

__all__ = ["BLIND_SPOTS", "TASKS", "BlindSpot", "TinyExample", "generate_task", "in_blind_spot", "solve_countdown"]


@dataclass(frozen=True)
class TinyExample:
    prompt: str
    demonstration: str
    ground_truth: Any
    reference: str  # the correct demonstration, used by similarity rewards
    imperfect: bool
    fields: dict[str, Any]


def solve_countdown(numbers: list[int], target: int) -> tuple[str, list[str]] | None:
    """An expression using every number once with + - * that equals target, with its steps; None if unreachable.

    Exhaustive over orders and left-deep/paired trees, which is complete for 3 numbers and
    covers the shapes generated for 4.
    """
    for perm in itertools.permutations(numbers):
        for ops in itertools.product("+-*", repeat=len(perm) - 1):
            # left-deep: ((a o b) o c) o d
            value, expr, steps = perm[0], str(perm[0]), []
            for op, n in zip(ops, perm[1:], strict=True):
                new = value + n if op == "+" else value - n if op == "-" else value * n
                steps.append(f"{value} {op} {n} = {new}")
                expr = f"({expr} {op} {n})"
                value = new
            if value == target:
                return expr[1:-1], steps
            if len(perm) == 4:  # paired: (a o b) o (c o d)
                a, b, c, d = perm
                left = {"+": a + b, "-": a - b, "*": a * b}[ops[0]]
                right = {"+": c + d, "-": c - d, "*": c * d}[ops[2]]
                total = {"+": left + right, "-": left - right, "*": left * right}[ops[1]]
                if total == target:
                    expr = f"({a} {ops[0]} {b}) {ops[1]} ({c} {ops[2]} {d})"
                    return expr, [f"{a} {ops[0]} {b} = {left}", f"{c} {ops[2]} {d} = {right}",
                                  f"{left} {ops[1]} {right} = {total}"]
    return None


_NAMES = ["Ava", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun"]


@dataclass(frozen=True)
class BlindSpot:
    """A task's slip and the prompts the expert makes it on more often (``blind_spot_slip``): the one definition,
    used by the generator and by the reproduction report (through each row's ``extra_info["blind_spot"]``)."""

    slip: str  # what a slipped demonstration does
    description: str  # which prompts are on the blind spot
    contains: Callable[[dict[str, Any]], bool]  # the example's fields -> member or not


_EARLY_STOP = "stops one step early and answers with the partial result"
#: task -> its blind spot, decided on the fields each generator records in ``extra_info``.
BLIND_SPOTS: dict[str, BlindSpot] = {
    "countdown_tiny": BlindSpot(_EARLY_STOP, "the first number is at most 4", lambda fields: fields["numbers"][0] <= 4),
    "arith_tiny": BlindSpot(_EARLY_STOP, f"the person is {', '.join(_NAMES[:3])} or {_NAMES[3]}",
                            lambda fields: fields["name"] in _NAMES[:4]),
    "meeting_tiny": BlindSpot("swaps the vote count in its summary", f"the mover is {', '.join(_NAMES[:2])} or "
                              f"{_NAMES[2]}", lambda fields: fields["facts"]["mover"] in _NAMES[:3]),
}


def in_blind_spot(task: str, fields: dict[str, Any]) -> bool:
    """Whether an example of ``task`` with these fields lies on the expert's blind spot."""
    return BLIND_SPOTS[task].contains(fields)


def _slips(rng: random.Random, spec: dict[str, Any], blind_spot: bool) -> bool:
    """Whether the expert's demonstration of this example is wrong: more often on its blind spot."""
    slip = spec.get("blind_spot_slip")
    rate = spec["imperfect_fraction"] if not blind_spot or slip is None else slip
    return rng.random() < rate


def _countdown(rng: random.Random, spec: dict[str, Any], index: int) -> TinyExample:
    while True:
        count = rng.choice(spec["numbers_per_task"])
        numbers = [rng.randint(1, spec["max_number"]) for _ in range(count)]
        ops = [rng.choice("+-*") for _ in range(count - 1)]
        target = numbers[0]
        for op, n in zip(ops, numbers[1:], strict=True):
            target = target + n if op == "+" else target - n if op == "-" else target * n
        if 1 <= target <= spec["max_target"]:
            solved = solve_countdown(numbers, target)
            if solved is not None:
                break
    expr, steps = solved
    prompt = f"Use {numbers} and + - * to make {target}, each number once. Answer in <answer> </answer>."
    reference = "<think>" + "\n".join(steps) + "</think>\n<answer>" + expr + "</answer>"
    fields = {"numbers": numbers, "target": target}
    imperfect = _slips(rng, spec, in_blind_spot("countdown_tiny", fields))
    demonstration = reference
    if imperfect:  # the expert stops one step early and answers with the partial expression (not every number)
        demonstration = "<think>" + "\n".join(steps[:-1]) + "</think>\n<answer>" + _left_operand(expr) + "</answer>"
    return TinyExample(prompt, demonstration, {"numbers": numbers, "target": target}, reference, imperfect, fields)


def _left_operand(expr: str) -> str:
    """The left operand of an expression's last top-level operator, outer parentheses removed."""
    depth, last = 0, -1
    for i, char in enumerate(expr):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and char in "+-*" and expr[i - 1] == " ":
            last = i
    left = expr[:last].strip()
    return left[1:-1] if left.startswith("(") and left.endswith(")") else left


_ITEMS = ["apples", "pencils", "stamps", "marbles", "cookies", "books"]


def _arith(rng: random.Random, spec: dict[str, Any], index: int) -> TinyExample:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    top = spec.get("arith_max_number") or spec["max_number"]
    a, b, c = (rng.randint(2, top) for _ in range(3))
    if rng.random() < 0.5:
        question = (f"{name} has {a} {item}. {name} buys {b} bags with {c} {item} in each bag. "
                    f"How many {item} does {name} have now?")
        steps = [f"{b} * {c} = {b * c}", f"{a} + {b * c} = {a + b * c}"]
        answer = a + b * c
    else:
        a = a + b + c
        question = f"{name} has {a} {item}, gives {b} to a friend and then {c} to a sister. How many are left?"
        steps = [f"{a} - {b} = {a - b}", f"{a - b} - {c} = {a - b - c}"]
        answer = a - b - c
    reference = "\n".join(steps) + f"\nThe answer is \\boxed{{{answer}}}."
    fields = {"answer": answer, "name": name}
    imperfect = _slips(rng, spec, in_blind_spot("arith_tiny", fields))
    # The expert stops one step early and boxes the intermediate result
    demonstration = (f"{steps[0]}\nThe answer is \\boxed{{{steps[0].split(' = ')[1]}}}." if imperfect
                     else reference)
    gold = "\n".join(steps) + f"\n#### {answer}"
    return TinyExample(f"{question} {TINY_MATH_SUFFIX}", demonstration, gold, reference, imperfect, fields)


_TOPICS = [("road repairs", "Public Works"), ("a new library branch", "Libraries"), ("park lighting", "Parks"),
           ("bike lanes", "Transportation"), ("a youth jobs program", "Community Services")]


def _meeting(rng: random.Random, spec: dict[str, Any], index: int) -> TinyExample:
    topic, department = rng.choice(_TOPICS)
    mover, seconder = rng.sample(_NAMES, 2)
    amount = rng.randint(2, 90) * 5_000
    votes_for = rng.randint(3, 7)
    votes_against = rng.randint(0, 7 - votes_for + 2)
    passed = votes_for > votes_against
    motion = f"Resolution {2020 + index % 6}-{rng.randint(10, 99)}"
    filler = rng.sample(["Thank you, Chair.", "Can we hear from staff?", "I have a question about the timeline.",
                         "Staff recommends approval.", "Is there public comment? Seeing none."], 2)
    transcript = "\n".join([
        f"Chair: Next item, {motion}, funding {topic} through the {department} Department for ${amount:,}.",
        f"Councilmember {mover}: I move to approve {motion}.", f"Councilmember {seconder}: Second.",
        *filler, f"Clerk: The vote is {votes_for} in favor, {votes_against} opposed.",
        f"Chair: The motion {'passes' if passed else 'fails'}.",
    ])
    reference = (f"The council considered {motion} to fund {topic} through the {department} Department "
                 f"(${amount:,}). Councilmember {mover} moved and Councilmember {seconder} seconded; the motion "
                 f"{'passed' if passed else 'failed'} {votes_for}-{votes_against}.")
    facts = {"motion": motion, "topic": topic, "department": department, "amount": amount, "mover": mover,
             "seconder": seconder, "votes_for": votes_for, "votes_against": votes_against, "passed": passed}
    prompt = f"Summarize the following city council meeting segment in one or two sentences.\n\n{transcript}"
    fields = {"facts": facts, "transcript": transcript}
    imperfect = _slips(rng, spec, in_blind_spot("meeting_tiny", fields))
    demonstration = reference.replace(f"{votes_for}-{votes_against}", f"{votes_against}-{votes_for}") if imperfect \
        else reference
    return TinyExample(prompt, demonstration, reference, reference, imperfect, fields)


#: Draws in a row that only repeat seen prompts before a task counts as exhausted (its distinct prompts fewer than the
#: split sizes ask): a task with that many more left unseen has under one in 20,000 of its prompts still to find.
_EXHAUSTED_AFTER = 20_000

#: task name -> (generator, data_source, ability)
TASKS: dict[str, tuple[Callable[[random.Random, dict[str, Any], int], TinyExample], str, str]] = {
    "countdown_tiny": (_countdown, "tiny/countdown", "math"),
    "arith_tiny": (_arith, "tiny/arith", "math"),
    "meeting_tiny": (_meeting, "tiny/meeting", "summarization"),
}


def generate_task(task: str, spec: dict[str, Any], seed: int) -> dict[str, list[dict[str, Any]]]:
    """Rows per output (``rl_train``, ``rl_val``, ``rl_test``, ``sft_train``); no prompt appears in two splits.

    ``rl_val`` (``n_val`` prompts, may be 0) is where shared settings are tuned, so ``rl_test`` is read once.
    """
    generator, data_source, ability = TASKS[task]
    rng = random.Random(f"{task}:{seed}")
    seen: dict[str, str] = {}  # normal form -> the prompt kept
    out: dict[str, list[dict[str, Any]]] = {"rl_train": [], "rl_val": [], "rl_test": [], "sft_train": []}
    duplicates = 0
    near_duplicates: list[tuple[str, str]] = []  # (prompt kept, prompt merged with it by the normal form)
    asked = spec["n_test"] + spec.get("n_val", 0) + spec["n_train"]
    for split, size in (("test", spec["n_test"]), ("val", spec.get("n_val", 0)), ("train", spec["n_train"])):
        index = misses = 0
        while len(out[f"rl_{split}"]) < size:
            example = generator(rng, spec, index)
            index += 1
            key = question_form(example.prompt)  # the normal form the split and the overlap check compare
            if key in seen:
                duplicates += 1
                if seen[key] != example.prompt:
                    near_duplicates.append((seen[key], example.prompt))
                misses += 1
                if misses >= _EXHAUSTED_AFTER:
                    raise ValueError(
                        f"data.tiny.n_{split}: {task} has only about {len(seen)} distinct prompts with these settings "
                        f"(numbers_per_task, max_number, max_target), and n_test + n_val + n_train = {asked} were "
                        f"asked ({len(out[f'rl_{split}'])} of n_{split} = {size} found); lower the split sizes or "
                        "widen the task")
                continue
            misses = 0
            seen[key] = example.prompt
            extra = {"index": len(out[f"rl_{split}"]), "split": split, "reference": example.reference,
                     "imperfect_demonstration": example.imperfect,
                     "blind_spot": in_blind_spot(task, example.fields), **example.fields}
            messages = [{"role": "user", "content": example.prompt}]
            out[f"rl_{split}"].append(rl_row(prompt=messages, data_source=data_source, ability=ability,
                                             ground_truth=example.ground_truth, extra_info=extra))
            if split == "train":
                out["sft_train"].append(sft_row([*messages, {"role": "assistant", "content": example.demonstration}],
                                                extra))
    out["_duplicates"] = duplicates  # type: ignore[assignment]
    out["_near_duplicates"] = near_duplicates  # type: ignore[assignment]
    return out
