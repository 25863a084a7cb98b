"""Output schemas (verl RLHFDataset / multi-turn SFT), deterministic holdouts and the manifest.

RL rows: ``prompt`` (chat messages), ``data_source``, ``ability``,
``reward_model = {style, ground_truth}``, ``extra_info`` (index, split, reference
answer, task fields, reward composition). SFT rows: ``messages`` (the demonstration).
Ground truths that are not strings (Countdown's numbers/target) are stored as JSON text
so every row of a column has one type; ``pipeline_lib.core.rewards`` parses them back.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline_lib.core.data.question_form import merge_kinds, question_form
from pipeline_lib.core.io import atomic_path, sha256_file, write_json

__all__ = [
    "HELD_OUT_SPLITS",
    "DataError",
    "DatasetWriter",
    "holdout_mask",
    "model_prompt",
    "prompt_hash",
    "prompt_key",
    "question_form",
    "rl_row",
    "sft_row",
]

MATH_SUFFIX = "Please reason step by step, and put your final answer within \\boxed{}."
POETRY_SYSTEM = "You are a helpful assistant that writes poetry."
#: The system message of every GSM8K, DeepMath and Countdown prompt, word for word the authors'
#: (``softmaxgrpo/prepare_data.py`` ``SYSTEM``; the paper gives no prompt for these tasks).
AUTHORS_SYSTEM = "You are a helpful assistant. Think through the problem before providing the answer."
#: The system message of every OpenThoughts prompt, word for word the authors' (``softmaxgrpo/prepare_data.py``: their
#: shared system message plus the think-tag instruction they add for OpenThoughts); AlpacaEval's answers are generated
#: under it without its middle sentence (``eval.transfer.alpaca_eval.system_prompt``, their ``evaluate.py``).
OPENTHOUGHTS_SYSTEM = AUTHORS_SYSTEM + " Put your reasoning in <think> </think> tags, followed by your final answer."


class DataError(ValueError):
    """Bad input data; the message names the dataset, the file and the row."""

    def __init__(self, dataset: str, source: str, message: str, row: int | None = None) -> None:
        where = f"{dataset}: {source}" + (f", row {row}" if row is not None else "")
        super().__init__(f"{where}: {message}")


def rl_row(*, prompt: Sequence[Mapping[str, str]], data_source: str, ability: str, ground_truth: Any,
           extra_info: Mapping[str, Any], style: str = "rule") -> dict[str, Any]:
    truth = ground_truth if isinstance(ground_truth, str) else json.dumps(ground_truth, sort_keys=True)
    return {"data_source": data_source, "prompt": [dict(m) for m in prompt], "ability": ability,
            "reward_model": {"style": style, "ground_truth": truth}, "extra_info": dict(extra_info)}


def sft_row(messages: Sequence[Mapping[str, str]], extra_info: Mapping[str, Any]) -> dict[str, Any]:
    return {"messages": [dict(m) for m in messages], "extra_info": dict(extra_info)}


def model_prompt(messages: Iterable[Mapping[str, Any]]) -> str:
    """The prompt exactly as the model sees it: every message's role and content, verbatim (whitespace included), as
    canonical JSON. Two rows share a model-visible prompt exactly when these strings are equal, whatever chat template
    renders them. The split, the de-duplication and the overlap check compare :func:`prompt_key` (its normal form)."""
    return json.dumps([[str(m["role"]), str(m["content"])] for m in messages], ensure_ascii=False)


def prompt_key(messages: Iterable[Mapping[str, Any]]) -> str:
    """:func:`model_prompt` with every message's content in :func:`question_form`: equal for two prompts that differ
    only by invisible or cosmetic characters. The de-duplication, the train/test split and the overlap check all
    compare these, so near-duplicates merge and never cross the split."""
    return json.dumps([[str(m["role"]), question_form(str(m["content"]))] for m in messages], ensure_ascii=False)


#: Splits the model is evaluated on: no prompt of theirs may occur in an output it trains on.
HELD_OUT_SPLITS = ("test", "val")


def prompt_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def holdout_mask(prompts: Iterable[str], fraction: float, salt: str) -> list[bool]:
    """Deterministic holdout grouped by prompt: equal prompts always land in the same split."""
    threshold = int(fraction * 10_000)
    return [int(prompt_hash(salt + p)[:8], 16) % 10_000 < threshold for p in prompts]


@dataclass
class DatasetWriter:
    """Collects splits, filters and source facts, then writes parquet files and ``manifest.json`` atomically."""

    name: str
    out_dir: Path
    source: dict[str, Any]
    licence: str
    split_policy: str
    filters: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, Path] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    prompts: dict[str, set[str]] = field(default_factory=dict)  # output -> its prompt keys (prompt_key)
    near_duplicates: int = 0  # verbatim-distinct prompts merged with another only by the normal form
    near_duplicate_kinds: dict[str, int] = field(default_factory=dict)  # form step -> merged prompts that needed it

    def count_near_duplicates(self, verbatim: Iterable[str], keys: Iterable[str],
                              texts: Iterable[str] | None = None) -> None:
        """Count the prompts the normal form merged: distinct verbatim prompts minus distinct keys, over one pool of
        rows (every split of a source before its filters), reported as ``near_duplicates_merged``. With ``texts``
        (each row's varying text, the one the form normalises) each merged prompt is also counted under the kinds of
        difference it needed (:func:`merge_kinds`), reported as ``near_duplicates_by_kind``."""
        verbatim, keys = list(verbatim), list(keys)
        self.near_duplicates += len(set(verbatim)) - len(set(keys))
        if texts is None:
            return
        groups: dict[str, list[str]] = {}
        for text, key in zip(texts, keys, strict=True):
            groups.setdefault(key, []).append(text)
        self.count_merges(groups.values())

    def count_merges(self, groups: Iterable[Iterable[str]]) -> None:
        """Count the merged texts of each group (texts sharing one key) under the kinds of difference they needed
        (:func:`merge_kinds`); a group whose texts' own forms differ (merged by their template) counts under
        ``prompt_template``."""
        for group in groups:
            texts = list(dict.fromkeys(group))
            if len(texts) < 2:
                continue
            if len({question_form(t) for t in texts}) > 1:
                kinds = [("prompt_template",)] * (len(texts) - 1)
            else:
                kinds = merge_kinds(texts)
            for needed in kinds:
                for kind in needed:
                    self.near_duplicate_kinds[kind] = self.near_duplicate_kinds.get(kind, 0) + 1

    def count_filter(self, reason: str, removed: int) -> None:
        self.filters[reason] = self.filters.get(reason, 0) + int(removed)

    def write(self, kind: str, split: str, rows: list[dict[str, Any]]) -> Path:
        if not rows:
            files = [f.get("file") for f in self.source.get("files", [])] or self.source
            raise DataError(self.name, str(files), f"{kind}/{split} is empty after filtering (see filters: "
                            f"{self.filters})")
        path = self.out_dir / f"{kind}_{split}.parquet"  # e.g. rl_train, rl_sim_train, sft_train
        with atomic_path(path) as tmp:
            pd.DataFrame(rows).to_parquet(tmp, index=False)
        self.outputs[f"{kind}_{split}"] = path
        self.counts[f"{kind}_{split}"] = len(rows)
        self.prompts[f"{kind}_{split}"] = {prompt_key(r["prompt"] if "prompt" in r else r["messages"][:-1])
                                           for r in rows}
        return path

    def shared_prompts(self) -> set[str]:
        """Prompt keys (:func:`prompt_key`) of a held-out output (``rl_test``, ``rl_val``) that an output trained on
        also has."""
        held = set().union(*(p for key, p in self.prompts.items() if key.rsplit("_", 1)[1] in HELD_OUT_SPLITS))
        trained = set().union(*(p for key, p in self.prompts.items() if key.rsplit("_", 1)[1] not in HELD_OUT_SPLITS))
        return held & trained

    def finish(self, extra: Mapping[str, Any] | None = None) -> Path:
        shared = self.shared_prompts()
        if shared:  # the builders remove these; a builder that does not is a bug, never a silently leaking test set
            raise DataError(self.name, str(self.out_dir), f"{len(shared)} prompt(s) (normal form) occur in a held-out "
                            f"split and in a training output, e.g. {min(shared)!r:.300}")
        manifest = {
            "dataset": self.name, "source": self.source, "licence": self.licence, "split_policy": self.split_policy,
            "row_counts": self.counts, "filters": self.filters, "near_duplicates_merged": self.near_duplicates,
            "near_duplicates_by_kind": dict(sorted(self.near_duplicate_kinds.items())),
            "outputs": {key: {"path": str(path), "sha256": sha256_file(path)} for key, path in self.outputs.items()},
            **dict(extra or {}),
        }
        path = self.out_dir / "manifest.json"
        write_json(path, manifest)
        return path


def source_fingerprint(paths: Iterable[str | os.PathLike[str]]) -> dict[str, str]:
    return {str(p): sha256_file(p) for p in paths}
