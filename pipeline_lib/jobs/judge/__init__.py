"""LLM-judge scoring (work in progress for the evaluation/judge issue): rubrics, parsing, normalisation."""
