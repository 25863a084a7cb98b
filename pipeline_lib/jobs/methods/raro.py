"""RARO's method logic on every engine (paper App. B): the critic's prompt, its verdicts and the outcome table.

The local engine (:mod:`pipeline_lib.jobs.engines.local.raro`) and verl's agent loop
(:mod:`pipeline_lib.jobs.engines.verl.raro_loop`) both read a critic reply and reward it through these, so the two
engines implement one RARO.
"""

from __future__ import annotations

import torch

from pipeline_lib.core.rewards.extract import extract_answer

__all__ = ["VERDICTS", "critic_messages", "outcome_rewards", "parse_verdict"]

#: What one critic reply says about an (expert, policy) pair.
VERDICTS = ("expert_better", "policy_better", "tie", "invalid")


def parse_verdict(text: str, expert_first: bool) -> str:
    """Map the critic's ``1`` / ``2`` / ``tie`` answer to a verdict about the expert; anything else is invalid."""
    answer = extract_answer(text, allow_boxed=False)
    answer = answer.strip().lower() if answer is not None else ""
    if answer == "tie":
        return "tie"
    if answer in ("1", "2"):
        return "expert_better" if (answer == "1") == expert_first else "policy_better"
    return "invalid"


def outcome_rewards(verdicts: list[str], table: dict[str, float]) -> torch.Tensor:
    """Rewards of a list of verdicts under an outcome table (a mapping verdict -> reward covering all four)."""
    missing = [v for v in VERDICTS if v not in table]
    if missing:
        raise KeyError(f"RARO outcome table {table} lacks {missing}")
    return torch.tensor([float(table[v]) for v in verdicts], dtype=torch.float32)


def critic_messages(system: str, question: str, first: str, second: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"{question}\n\nAnswer 1:\n{first}\n\nAnswer 2:\n{second}\n\nWhich answer "
                                        "is better? Reply <answer>1</answer>, <answer>2</answer> or "
                                        "<answer>tie</answer>."}]
