"""Poetry instruction synthesis (App. B): ask an LLM what instruction would most naturally produce each poem."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pipeline_lib.core.llm_client import ChatRequest, EndpointConfig, ResponseCache, run_chat_requests

__all__ = ["SYNTHESIS_PROMPT", "synthesize_instructions"]

log = logging.getLogger("pipeline_lib.core.data.poetry")
SYNTHESIS_PROMPT = (
    "Here is a poem.\n\n{poem}\n\nWhat instruction, given to a poet, would most naturally have produced exactly "
    "this poem? Mention its topic and any stylistic constraints it follows (form, meter, rhyme, length, tone). "
    "Reply with the instruction only, in one or two sentences, addressed to the poet."
)


def synthesize_instructions(poems: list[str], section: dict[str, Any], cache_path: Path) -> dict[str, str | None]:
    """Instruction per poem (None where the endpoint failed after retries; a rerun retries only those)."""
    config = EndpointConfig.from_config(section, "Poetry instruction synthesis")
    unique = list(dict.fromkeys(poems))
    requests = [ChatRequest(({"role": "user", "content": SYNTHESIS_PROMPT.format(poem=p)},)) for p in unique]
    bar = tqdm(total=len(requests), desc="synthesising poetry instructions", file=sys.stderr)
    results = run_chat_requests(config, requests, ResponseCache(cache_path), on_done=bar.update)
    bar.close()
    out: dict[str, str | None] = {}
    failures = 0
    for poem, result in zip(unique, results, strict=True):
        text = (result.get("content") or "").strip() if "error" not in result else ""
        out[poem] = text.strip('"').strip() or None
        failures += out[poem] is None
    log.info("synthesised %d instructions (%d cached, %d failed) with %s", len(unique) - failures,
             sum(bool(r.get("cached")) for r in results), failures, config.describe())
    return out
