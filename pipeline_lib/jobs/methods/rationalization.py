"""Rationalization's demonstrations on every engine (STaR, paper App. B): the hinted annotator prompt and the assembly
of rationale and expert answer, shared by the local annotator (:mod:`pipeline_lib.jobs.engines.local.rationalization`)
and the GPU one (:mod:`pipeline_lib.jobs.engines.verl.rationalization`), so both write the same demonstrations.
"""

from __future__ import annotations

import pandas as pd

from pipeline_lib.core.data.schema import sft_row
from pipeline_lib.jobs.methods.expert import split_reasoning

__all__ = ["assemble", "hinted_prompts", "rationalized_frame"]


def hinted_prompts(conversations: list[list[dict[str, str]]], hint: str) -> tuple[list[list[dict[str, str]]],
                                                                                  list[str]]:
    """(annotator prompts, expert answer parts): the question with the expert answer as a hint, one per conversation.

    Shared by every engine's annotator (local generation here, the GPU generation backends in
    ``pipeline_lib.jobs.engines.verl.rationalization``), so both write the same demonstrations.
    """
    answers = [split_reasoning(c[-1]["content"])[1] for c in conversations]
    hinted = [[*c[:-2], {**c[-2], "content": c[-2]["content"] + "\n\n" + hint.format(answer=a.strip())}]
              for c, a in zip(conversations, answers, strict=True)]
    return hinted, answers


def assemble(annotations: list[str], answers: list[str]) -> list[str]:
    """Rationale (reasoning part of each annotation) followed by the expert's answer part."""
    return [split_reasoning(text)[0] + answer for text, answer in zip(annotations, answers, strict=True)]


def rationalized_frame(frame: pd.DataFrame, demos: list[str]) -> pd.DataFrame:
    """The SFT parquet rows: the original question turns, the assembled demonstration as the assistant turn."""
    conversations = [[dict(m) for m in messages] for messages in frame["messages"]]
    return pd.DataFrame([sft_row([*c[:-1], {"role": "assistant", "content": d}], dict(extra) | {"rationalized": True})
                         for c, d, extra in zip(conversations, demos, frame["extra_info"], strict=True)])
