"""Expert demonstrations beside the RL prompts, split into reasoning and final answer.

Several baselines condition on the expert answer a* of a prompt (RL-Logit scores log pi(a* | q, z),
Rationalization asks for a rationale of a*, RARO's critic compares a* with the policy's answer,
Iterative DPO prefers it). They all read it here, from the same SFT demonstrations SFT trains on.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

__all__ = ["expert_demonstrations", "split_reasoning"]


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, answer part) with ``reasoning + answer part == text``.

    Cut after the last ``</think>``; without one, before the last line that holds an ``<answer>``
    or ``\\boxed{`` (the newline goes with the answer part); else the whole text is the answer.
    """
    cut = text.rfind("</think>")
    if cut >= 0:
        cut += len("</think>")
        return text[:cut], text[cut:]
    marker = max(text.rfind("<answer>"), text.rfind("\\boxed{"))
    if marker >= 0:
        line = text.rfind("\n", 0, marker)
        if line >= 0:
            return text[:line], text[line:]
    return "", text


def expert_demonstrations(rl_frame: pd.DataFrame, sft_path: Path) -> list[str]:
    """The demonstration of every RL prompt row, matched by prompt text (error names the row that has none)."""
    sft = pd.read_parquet(sft_path)
    by_prompt: dict[str, str] = {}
    for messages in sft["messages"]:
        user = "\n".join(m["content"] for m in messages[:-1])
        by_prompt.setdefault(user, messages[-1]["content"])
    out = []
    for row, prompt in enumerate(rl_frame["prompt"]):
        key = "\n".join(m["content"] for m in prompt)
        if key not in by_prompt:
            raise KeyError(f"{sft_path}: no demonstration for RL prompt row {row} ({key[:80]!r}...)")
        out.append(by_prompt[key])
    return out
