"""Rubric prompts (templates under ``config/prompts/``) and the JSON keys each judge must return.

The templates reproduce the paper's two rubric figures, with one added sentence on the inputs' delimiters. A template
is filled in one pass (one regex substitution over the template: a value is never scanned again, so a title holding
``{SUMMARY_TEXT}`` stays that text; ``str.format`` would trip on the prompts' JSON braces). Each value is enclosed
in ``<name-NONCE>`` ... ``</name-NONCE>`` tags (``{NONCE}`` in the template names them): the nonce is a digest of
the request's own inputs, so no input can know it in advance (it would have to contain its own digest), and it is
the same on a rerun (the response cache's keys are the prompts); an input's own ``<name-`` openings are neutralised
as well.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PAIRWISE_SOURCE", "RUBRICS", "Rubric", "pairwise_rubric"]

# named as one "config/..." string so the code digest of every module importing this one covers the prompts
PROMPTS = Path(__file__).resolve().parents[2] / "config/prompts"


@dataclass(frozen=True)
class Rubric:
    name: str
    template_path: Path
    keys: tuple[str, ...]
    fields: tuple[str, ...]
    scale: tuple[int, int] = (1, 10)
    #: A pairwise rubric's sides: per poem (field), the keys that score it, in ``fields`` order; () for a rubric
    #: that scores one text in isolation.
    sides: tuple[tuple[str, ...], ...] = ()

    def nonce(self, values: dict[str, str]) -> str:
        """The delimiters' tag suffix: a digest of this request's inputs (unguessable by them, stable on a rerun)."""
        payload = json.dumps([self.name, [values[field] for field in self.fields]])
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def render(self, **values: str) -> str:
        """The prompt: every ``{FIELD}`` (and ``{NONCE}``) of the template filled in one pass, each value delimited."""
        missing = sorted(set(self.fields) - set(values))
        if missing:
            raise KeyError(f"rubric {self.name!r} needs field(s) {missing}")
        nonce = self.nonce(values)
        # an input's own "<summary_text-" / "</poem_text-" (any field's tag, any case) cannot open or close a tag
        spoof = re.compile(r"<(?=\s*/?\s*(?:" + "|".join(f.lower() for f in self.fields) + r")\s*-)", re.IGNORECASE)
        filled = {"NONCE": nonce}
        for field in self.fields:
            tag = f"{field.lower()}-{nonce}"
            value = spoof.sub("\uff1c", values[field])  # a full-width "<": reads the same, opens nothing
            filled[field] = f"<{tag}>\n{value}\n</{tag}>"
        text = Path(self.template_path).read_text(encoding="utf-8")
        return re.sub(r"\{([A-Z][A-Z_]*)\}", lambda m: filled.get(m.group(1), m.group(0)), text)

    def identity(self) -> dict[str, Any]:
        """What of the rubric decides a verdict and its reading: name, keys, scale and the template's digest (a
        judge's cache key holds it: an edited rubric is asked again)."""
        template = hashlib.sha256(Path(self.template_path).read_bytes()).hexdigest()
        return {"name": self.name, "keys": list(self.keys), "scale": list(self.scale), "template_sha256": template}

    def json_schema(self) -> dict[str, Any]:
        """The verdict's JSON schema: an object with exactly the rubric's integer keys in range."""
        low, high = self.scale
        return {"type": "object", "additionalProperties": False, "required": list(self.keys),
                "properties": {k: {"type": "integer", "minimum": low, "maximum": high} for k in self.keys}}

    def structured_sampling(self, mode: str) -> dict[str, Any]:
        """The request parameters asking the server for a verdict in :meth:`json_schema` (``mode``: an endpoint's
        ``structured_output``); {} for "none"."""
        schema = self.json_schema()
        if mode == "response_format":  # the OpenAI form, which vLLM's server takes too
            return {"response_format": {"type": "json_schema",
                                        "json_schema": {"name": f"{self.name}_verdict", "schema": schema}}}
        if mode == "structured_outputs":  # vLLM >= 0.12's extra parameter
            return {"extra_body": {"structured_outputs": {"json": schema}}}
        if mode == "guided_json":  # vLLM < 0.12's extra parameter (removed in 0.12)
            return {"extra_body": {"guided_json": schema}}
        if mode == "none":
            return {}
        raise ValueError(f"structured_output {mode!r} is not one of none, response_format, structured_outputs, "
                         "guided_json")

    def normalise(self, scores: dict[str, int]) -> float:
        """The paper's 0-100 reporting scale: the mean dimension score times 10."""
        return 10.0 * sum(scores[k] for k in self.keys) / len(self.keys)


#: Where the pairwise Poetry prompt comes from: the paper scores poems "both in isolation and via pairwise comparison
#: to the expert reference with the rubric prompt shown in Figure fig:poetry_prompts" (App. B, Poetry Writing). The
#: figure shows the isolated prompt only; ``poetry_pairwise.txt`` is that figure's text (role, guidelines, the seven
#: dimensions A-G, output instructions) with two poems as inputs and both poems' seven scores as the JSON verdict
#: (A1-G1 the first poem's, A2-G2 the second's). The wording of the two-poem inputs and output is ours.
PAIRWISE_SOURCE = ("paper App. B 'Poetry Writing' and Figure fig:poetry_prompts (Poetry Evaluation Prompt), adapted "
                   "to two poems; the two-poem wording is this pipeline's")

_POETRY = tuple("ABCDEFG")
RUBRICS = {
    "poetry": Rubric("poetry", PROMPTS / "poetry.txt", _POETRY, ("POEM_TEXT",)),
    "poetry_pairwise": Rubric("poetry_pairwise", PROMPTS / "poetry_pairwise.txt",
                              tuple(f"{k}{side}" for side in (1, 2) for k in _POETRY),
                              ("FIRST_POEM_TEXT", "SECOND_POEM_TEXT"),
                              sides=tuple(tuple(f"{k}{side}" for k in _POETRY) for side in (1, 2))),
    # the paper's pipeline stores conciseness under the "redundancy" key
    "meetingbank": Rubric("meetingbank", PROMPTS / "meetingbank.txt",
                          ("informativeness", "factuality", "fluency", "coherence", "redundancy"),
                          ("MEETING_TITLE", "TRANSCRIPT_TEXT", "SUMMARY_TEXT")),
}


def pairwise_rubric(name: str) -> Rubric:
    """A pairwise rubric by name; an isolated one is an error naming the pairwise ones."""
    rubric = RUBRICS.get(name)
    if rubric is None or not rubric.sides:
        raise ValueError(f"{name!r} is not a pairwise rubric; pairwise rubrics: "
                         f"{sorted(n for n, r in RUBRICS.items() if r.sides)}")
    return rubric
