"""Rubric prompts (templates under ``config/prompts/``) and the JSON keys each judge must return.

The templates reproduce the paper's two rubric figures; ``{NAME}`` fields are filled with
``str.replace`` (not ``str.format``), since the prompts themselves contain JSON braces.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["RUBRICS", "Rubric"]

# named as one "config/..." string so the code digest of every module importing this one covers the prompts
PROMPTS = Path(__file__).resolve().parents[2] / "config/prompts"


@dataclass(frozen=True)
class Rubric:
    name: str
    template_path: Path
    keys: tuple[str, ...]
    fields: tuple[str, ...]
    scale: tuple[int, int] = (1, 10)

    def render(self, **values: str) -> str:
        missing = sorted(set(self.fields) - set(values))
        if missing:
            raise KeyError(f"rubric {self.name!r} needs field(s) {missing}")
        text = Path(self.template_path).read_text(encoding="utf-8")
        for field in self.fields:
            text = text.replace("{" + field + "}", values[field])
        return text

    def response_format(self) -> dict:
        """vLLM/OpenAI structured output: a JSON object with exactly the rubric's integer keys in range."""
        low, high = self.scale
        schema = {"type": "object", "additionalProperties": False, "required": list(self.keys),
                  "properties": {k: {"type": "integer", "minimum": low, "maximum": high} for k in self.keys}}
        return {"type": "json_schema", "json_schema": {"name": f"{self.name}_verdict", "schema": schema}}

    def normalise(self, scores: dict[str, int]) -> float:
        """The paper's 0-100 reporting scale: the mean dimension score times 10."""
        return 10.0 * sum(scores[k] for k in self.keys) / len(self.keys)


RUBRICS = {
    "poetry": Rubric("poetry", PROMPTS / "poetry.txt", tuple("ABCDEFG"), ("POEM_TEXT",)),
    # the paper's pipeline stores conciseness under the "redundancy" key
    "meetingbank": Rubric("meetingbank", PROMPTS / "meetingbank.txt",
                          ("informativeness", "factuality", "fluency", "coherence", "redundancy"),
                          ("MEETING_TITLE", "TRANSCRIPT_TEXT", "SUMMARY_TEXT")),
}
